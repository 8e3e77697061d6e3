package cgroup

// prioToWeight is the kernel's sched_prio_to_weight table
// (kernel/sched/core.c): the CFS load weight of nice -20..19, where nice 0
// is 1024 and each step is about 1.25x.
var prioToWeight = [40]uint64{
	/* -20 */ 88761, 71755, 56483, 46273, 36291,
	/* -15 */ 29154, 23254, 18705, 14949, 11916,
	/* -10 */ 9548, 7620, 6100, 4904, 3906,
	/*  -5 */ 3121, 2501, 1991, 1586, 1277,
	/*   0 */ 1024, 820, 655, 526, 423,
	/*   5 */ 335, 272, 215, 172, 137,
	/*  10 */ 110, 87, 70, 56, 45,
	/*  15 */ 36, 29, 23, 18, 15,
}

// Weight is the cgroup v2 cpu.weight equivalent of a nice value: the
// kernel's load weight for nice scaled so that nice 0 is the default
// weight 100 (weight = sched_prio_to_weight[nice+20] * 100 / 1024, rounded
// down), clamped to cpu.weight's range 1..10000. Nice outside -20..19 is
// clamped first, as setpriority does.
func Weight(nice int) uint64 {
	nice = min(max(nice, -20), 19)
	w := prioToWeight[nice+20] * 100 / 1024
	return min(max(w, 1), 10000)
}
