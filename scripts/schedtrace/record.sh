#!/bin/bash
# record.sh OUT [SECS]: while BenchmarkFairness runs, waits for its flood
# phase's victim (user gsfairv) and records SECS seconds (default 3) of the
# kernel's scheduler, system call and softirq events on every CPU, in a
# tracefs instance of its own, to OUT; OUT.pids names the victim's and the
# daemon's processes for analyse.py. Root; mounts tracefs where it is not.
set -euo pipefail
OUT=$1 SECS=${2:-3}
TRACING=/sys/kernel/tracing
[ -d $TRACING/instances ] || mount -t tracefs tracefs $TRACING
T=$TRACING/instances/gpusched-schedtrace-$$
for _ in $(seq 1 1200); do pgrep -u gsfairh -f "fairload hostile" >/dev/null && break; sleep 0.5; done
pgrep -u gsfairh -f "fairload hostile" >/dev/null || { echo "record.sh: no flood seen" >&2; exit 1; }
for _ in $(seq 1 2000); do pgrep -u gsfairv -x fairload >/dev/null && break; sleep 0.05; done
sleep 0.3 # into the victim's status calls
mkdir $T
trap 'rmdir $T' EXIT
echo 0 > $T/tracing_on
echo 262144 > $T/buffer_size_kb
echo mono > $T/trace_clock
echo 1 > $T/options/record-tgid
echo 0 > $T/options/overwrite
printf '%s\n' sched:sched_switch sched:sched_wakeup sched:sched_waking raw_syscalls:sys_enter \
	raw_syscalls:sys_exit irq:softirq_entry irq:softirq_exit > $T/set_event
{
	echo "victim: $(pgrep -u gsfairv -x fairload | tr '\n' ' ')"
	echo "daemon: $(pgrep -x gpuschedd | tr '\n' ' ')"
} > "$OUT.pids"
echo 1 > $T/tracing_on
sleep "$SECS"
echo 0 > $T/tracing_on
cat $T/trace > "$OUT"
grep -c . "$OUT"
