package placement_test

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/placement"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// dev is GPU i with total and used MiB and its occupants.
func dev(i int, total, used uint64, occ ...placement.Occupant) placement.GPU {
	return placement.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), TotalMiB: total, UsedMiB: used, Occupants: occ}
}

func ext(id string, used, peak uint64) placement.Occupant {
	return placement.Occupant{Kind: placement.External, ID: id, UsedMiB: used, PeakMiB: peak}
}

// victim is a preemptible managed process using its declaration.
func victim(id string, prio int, mib uint64) placement.Occupant {
	return placement.Occupant{Kind: placement.Managed, ID: id, UsedMiB: mib, PeakMiB: mib, DeclaredMiB: mib, Priority: prio, Preemptible: true, Owner: "u"}
}

// job is a declared job with defaults: owner "u", queued now; Seq is its
// place in the case's queue.
func job(id string, vram uint64, gpus int, mods ...func(*placement.Job)) placement.Job {
	j := placement.Job{ID: id, Owner: "u", QueuedAt: now, GPUs: gpus, VRAMMiB: vram}
	for _, m := range mods {
		m(&j)
	}
	return j
}

func prio(p int) func(*placement.Job)     { return func(j *placement.Job) { j.Priority = p } }
func owner(o string) func(*placement.Job) { return func(j *placement.Job) { j.Owner = o } }
func age(d time.Duration) func(*placement.Job) {
	return func(j *placement.Job) { j.QueuedAt = now.Add(-d) }
}
func only(pinned bool, uuids ...string) func(*placement.Job) {
	return func(j *placement.Job) { j.Only, j.Pinned = uuids, pinned }
}

func ptr[T any](v T) *T { return &v }

// render is a plan in one line per job: starts, then waits, then
// infeasible jobs, each in placement order.
func render(p placement.Plan) []string {
	var out []string
	for _, s := range p.Starts {
		line := "start " + s.JobID + " " + strings.Join(s.GPUs, ",")
		if len(s.Preempt) > 0 {
			line += " preempt " + strings.Join(s.Preempt, ",")
		}
		out = append(out, line)
	}
	for _, w := range p.Waits {
		out = append(out, "wait "+w.JobID+" "+string(w.Reason))
	}
	for _, w := range p.Infeasible {
		out = append(out, "infeasible "+w.JobID)
	}
	return out
}

func TestPlace(t *testing.T) {
	cases := []struct {
		name     string
		opts     func(*placement.Options)
		gpus     []placement.GPU
		queue    []placement.Job
		served   map[string]placement.Served
		want     []string
		detail   map[string]string // job ID -> the exact Detail
		reserved map[string]string // Plan.Reserved, where set
	}{
		{
			name:  "packs two jobs on one GPU",
			gpus:  []placement.GPU{dev(0, 40000, 0)},
			queue: []placement.Job{job("a", 15000, 1), job("b", 15000, 1), job("c", 15000, 1)},
			want:  []string{"start a GPU-0", "start b GPU-0", "wait c no_memory"},
			detail: map[string]string{
				"c": "needs 15000+512 MiB on 1 GPU; most headroom: GPU 0 10000 MiB",
			},
		},
		{
			name: "best fit picks the fullest GPU that fits",
			gpus: []placement.GPU{
				dev(0, 80000, 0),
				dev(1, 80000, 50000, ext("x", 50000, 50000)), // 55000 charged
				dev(2, 80000, 70000, ext("y", 70000, 70000)), // 77000 charged
			},
			queue: []placement.Job{job("a", 10000, 1)},
			want:  []string{"start a GPU-1"},
		},
		{
			name:  "margin respected",
			gpus:  []placement.GPU{dev(0, 12000, 2000, ext("x", 2000, 2000))}, // 2200 charged
			queue: []placement.Job{job("a", 9289, 1), job("b", 9288, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
		},
		{
			name: "declared job over its declaration is charged peak x (1 + spike)",
			gpus: []placement.GPU{dev(0, 20000, 9000, placement.Occupant{
				Kind: placement.Managed, ID: "m", UsedMiB: 9000, PeakMiB: 10000, DeclaredMiB: 8000,
			})}, // 11000 charged
			queue: []placement.Job{job("a", 8489, 1), job("b", 8488, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
		},
		{
			name: "declared job within its declaration is charged its declaration",
			gpus: []placement.GPU{dev(0, 20000, 2000, placement.Occupant{
				Kind: placement.Managed, ID: "m", UsedMiB: 2000, PeakMiB: 3000, DeclaredMiB: 8000,
			})},
			queue: []placement.Job{job("a", 11489, 1), job("b", 11488, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
		},
		{
			name:  "external is charged peak x (1 + spike)",
			gpus:  []placement.GPU{dev(0, 20000, 5000, ext("x", 5000, 10000))},
			queue: []placement.Job{job("a", 8489, 1), job("b", 8488, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
		},
		{
			name:  "unattributed memory is charged",
			gpus:  []placement.GPU{dev(0, 20000, 6000, ext("x", 1000, 1000))}, // 1100 + 5000
			queue: []placement.Job{job("a", 13389, 1), job("b", 13388, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
		},
		{
			name: "undeclared job needs an idle GPU; a frozen occupant does not block it",
			gpus: []placement.GPU{
				dev(0, 20000, 1000, ext("x", 1000, 1000)),
				dev(1, 20000, 0, placement.Occupant{Kind: placement.Frozen, ID: "f", PeakMiB: 15000, DeclaredMiB: 15000}),
				dev(2, 20000, 600), // unattributed beyond the margin
			},
			queue: []placement.Job{job("a", 0, 1), job("b", 0, 1), job("c", 10000, 1)},
			want:  []string{"start a GPU-1", "start c GPU-0", "wait b no_idle_gpu"},
			detail: map[string]string{
				"b": "needs 1 whole idle GPU; none is idle",
			},
		},
		{
			name:  "multi-GPU job takes distinct GPUs, best fit first",
			gpus:  []placement.GPU{dev(0, 40000, 0), dev(1, 10000, 0)},
			queue: []placement.Job{job("a", 8000, 2), job("b", 8000, 2)},
			want:  []string{"start a GPU-1,GPU-0", "wait b no_memory"},
			detail: map[string]string{
				"b": "needs 8000+512 MiB on 2 GPUs; most headroom: GPU 0 32000 MiB, GPU 1 2000 MiB",
			},
		},
		{
			name:  "infeasible: too big",
			gpus:  []placement.GPU{dev(0, 40000, 0), dev(1, 30000, 0)},
			queue: []placement.Job{job("a", 39600, 1), job("b", 30000, 2)},
			want:  []string{"infeasible a", "infeasible b"},
			detail: map[string]string{
				"a": "needs 39600+512 MiB on 1 GPU; the most it can ever get is 40000 MiB",
				"b": "needs 30000+512 MiB on 2 GPUs; the most it can ever get on 2 GPUs is 30000 MiB each",
			},
		},
		{
			name:   "infeasible: too many GPUs",
			gpus:   []placement.GPU{dev(0, 40000, 0), dev(1, 40000, 0)},
			queue:  []placement.Job{job("a", 1000, 3), job("none", 1000, 0), job("huge", math.MaxUint64, 1)},
			want:   []string{"infeasible a", "infeasible none", "infeasible huge"},
			detail: map[string]string{"a": "needs 3 GPUs; the machine has 2", "none": "asks for 0 GPUs"},
		},
		{
			name:   "infeasible: banned GPU",
			opts:   func(o *placement.Options) { o.Banned = []string{"GPU-1"} },
			gpus:   []placement.GPU{dev(0, 40000, 0), dev(1, 40000, 0)},
			queue:  []placement.Job{job("a", 1000, 2)},
			want:   []string{"infeasible a"},
			detail: map[string]string{"a": "needs 2 GPUs; only 1 may be used (the rest are banned or outside its Only list)"},
		},
		{
			name: "infeasible: permanent filler; a transient one only delays",
			gpus: []placement.GPU{
				dev(0, 40000, 30000, placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 30000, Permanent: true}),
			},
			queue: []placement.Job{job("a", 20000, 1), job("b", 0, 1), job("c", 9000, 1)},
			want:  []string{"start c GPU-0", "infeasible a", "infeasible b"},
			detail: map[string]string{
				"a": "needs 20000+512 MiB on 1 GPU; the most it can ever get is 10000 MiB",
				"b": "needs 1 whole idle GPU; only 0 can ever be idle (the rest hold permanent reserves)",
			},
		},
		{
			name:  "non-permanent filler: waits",
			gpus:  []placement.GPU{dev(0, 40000, 30000, placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 30000})},
			queue: []placement.Job{job("a", 20000, 1)},
			want:  []string{"wait a no_memory"},
		},
		{
			name: "filler: hands over to its owner's jobs, charges everyone else's",
			gpus: []placement.GPU{dev(0, 40000, 38000, placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 38000, Owner: "u"})},
			queue: []placement.Job{job("other", 3000, 1, owner("v")), job("a", 20000, 1), job("b", 10000, 1),
				job("c", 9600, 1)},
			// a and b take 30000 of the GPU's 40000 (the filler gives 30000 of
			// its 38000); c needs 9600+512 of the 10000 left.
			want: []string{"start a GPU-0", "start b GPU-0", "wait other no_memory", "wait c no_memory"},
		},
		{
			name:  "filler: an undeclared job of its owner takes the whole GPU",
			gpus:  []placement.GPU{dev(0, 40000, 30000, placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 30000, Owner: "u"})},
			queue: []placement.Job{job("other", 0, 1, owner("v")), job("a", 0, 1)},
			want:  []string{"start a GPU-0", "wait other no_idle_gpu"},
		},
		{
			name: "health: utilization",
			opts: func(o *placement.Options) { o.MaxUtilPercent = 80 },
			gpus: []placement.GPU{
				{Index: 0, UUID: "GPU-0", TotalMiB: 40000, UtilPercent: ptr(95)},
				dev(1, 40000, 35000, ext("x", 35000, 35000)),
				{Index: 2, UUID: "GPU-2", TotalMiB: 4000}, // unknown utilization passes
			},
			queue:  []placement.Job{job("a", 10000, 1), job("b", 3000, 1)},
			want:   []string{"start b GPU-2", "wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 utilization 95% > 80%"},
		},
		{
			name: "health: the job's own utilization limit, stricter",
			opts: func(o *placement.Options) { o.MaxUtilPercent = 90 },
			gpus: []placement.GPU{{Index: 0, UUID: "GPU-0", TotalMiB: 40000, UtilPercent: ptr(60)}},
			queue: []placement.Job{
				job("a", 10000, 1, func(j *placement.Job) { j.MaxUtilPercent = 50 }),
				job("b", 10000, 1),
			},
			want:   []string{"start b GPU-0", "wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 utilization 60% > 50%"},
		},
		{
			name: "health: power",
			opts: func(o *placement.Options) { o.MaxPowerWatts = 300 },
			gpus: []placement.GPU{
				{Index: 0, UUID: "GPU-0", TotalMiB: 40000, PowerWatts: ptr(310.5)},
				dev(1, 40000, 35000, ext("x", 35000, 35000)),
			},
			queue:  []placement.Job{job("a", 10000, 1)},
			want:   []string{"wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 power 310.5 W > 300 W"},
		},
		{
			name: "health: temperature",
			opts: func(o *placement.Options) { o.MaxTempC = 85 },
			gpus: []placement.GPU{
				{Index: 0, UUID: "GPU-0", TotalMiB: 40000, TempC: ptr(91)},
				dev(1, 40000, 35000, ext("x", 35000, 35000)),
				{Index: 2, UUID: "GPU-2", TotalMiB: 4000, TempC: ptr(85)}, // at the limit passes
				{Index: 3, UUID: "GPU-3", TotalMiB: 4000},                 // unknown temperature passes
			},
			queue:  []placement.Job{job("a", 10000, 1), job("b", 3000, 1), job("c", 3000, 1)},
			want:   []string{"start b GPU-2", "start c GPU-3", "wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 temperature 91 C > 85 C"},
		},
		{
			name: "health: the job's own temperature limit, stricter; the options' off",
			gpus: []placement.GPU{
				{Index: 0, UUID: "GPU-0", TotalMiB: 40000, TempC: ptr(70)},
				{Index: 1, UUID: "GPU-1", TotalMiB: 40000, TempC: ptr(50)},
			},
			queue: []placement.Job{
				job("a", 30000, 2, func(j *placement.Job) { j.MaxTempC = 60 }),
				job("b", 30000, 1, func(j *placement.Job) { j.MaxTempC = 60 }),
				job("c", 30000, 1),
			},
			want:   []string{"start b GPU-1", "start c GPU-0", "wait a unhealthy"},
			detail: map[string]string{"a": "needs 30000+512 MiB on 2 GPUs; room only on GPUs it skips: GPU 0 temperature 70 C > 60 C"},
		},
		{
			name: "health: the options' temperature limit, stricter than the job's",
			opts: func(o *placement.Options) { o.MaxTempC = 60 },
			gpus: []placement.GPU{{Index: 0, UUID: "GPU-0", TotalMiB: 40000, TempC: ptr(70)}},
			queue: []placement.Job{
				job("a", 10000, 1, func(j *placement.Job) { j.MaxTempC = 80 }),
			},
			want:   []string{"wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 temperature 70 C > 60 C"},
		},
		{
			name: "health: min free, the job's own above the options'",
			opts: func(o *placement.Options) { o.MinFreeMiB = 1000 },
			gpus: []placement.GPU{
				dev(0, 40000, 20000, placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 20000}),
			},
			queue: []placement.Job{
				job("a", 10000, 1, func(j *placement.Job) { j.MinFreeMiB = 25000 }),
				job("b", 10000, 1),
			},
			want:   []string{"start b GPU-0", "wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 free 20000 MiB < 25000 MiB"},
		},
		{
			name:   "health: banned",
			opts:   func(o *placement.Options) { o.Banned = []string{"GPU-0"} },
			gpus:   []placement.GPU{dev(0, 40000, 0), dev(1, 40000, 35000, ext("x", 35000, 35000))},
			queue:  []placement.Job{job("a", 10000, 1)},
			want:   []string{"wait a unhealthy"},
			detail: map[string]string{"a": "needs 10000+512 MiB on 1 GPU; room only on GPUs it skips: GPU 0 banned"},
		},
		{
			name:  "priority order",
			gpus:  []placement.GPU{dev(0, 20000, 0)},
			queue: []placement.Job{job("low", 15000, 1), job("high", 15000, 1, prio(5))},
			want:  []string{"start high GPU-0", "wait low no_memory"},
		},
		{
			name:  "backfill: a smaller job passes a blocked big one",
			gpus:  []placement.GPU{dev(0, 20000, 5000, ext("x", 5000, 5000))},
			queue: []placement.Job{job("big", 19000, 1), job("small", 5000, 1)},
			want:  []string{"start small GPU-0", "wait big no_memory"},
		},
		{
			name:  "aging moves an old low-priority job ahead",
			gpus:  []placement.GPU{dev(0, 20000, 0)},
			queue: []placement.Job{job("new", 15000, 1, prio(3)), job("old", 15000, 1, age(50*time.Minute))},
			want:  []string{"start old GPU-0", "wait new no_memory"},
		},
		{
			name:  "no aging: priority alone",
			opts:  func(o *placement.Options) { o.AgingStep = 0 },
			gpus:  []placement.GPU{dev(0, 20000, 0)},
			queue: []placement.Job{job("new", 15000, 1, prio(3)), job("old", 15000, 1, age(50*time.Minute))},
			want:  []string{"start new GPU-0", "wait old no_memory"},
		},
		{
			name: "starvation: a starving job holds the GPU it fits soonest",
			gpus: starveGPUs(),
			queue: []placement.Job{
				job("big", 30000, 1, age(time.Hour)),
				job("s1", 6000, 1), job("s2", 6000, 1), job("s3", 6000, 1),
			},
			want:     []string{"start s1 GPU-1", "start s2 GPU-1", "wait big no_memory", "wait s3 reserved"},
			detail:   map[string]string{"s3": "needs 6000+512 MiB on 1 GPU; room held for starving jobs: GPU 0 for big"},
			reserved: map[string]string{"GPU-0": "big"},
		},
		{
			name: "starvation off: backfill fills the best fit",
			opts: func(o *placement.Options) { o.StarveAfter = 0 },
			gpus: starveGPUs(),
			queue: []placement.Job{
				job("big", 30000, 1, age(time.Hour)),
				job("s1", 6000, 1), job("s2", 6000, 1), job("s3", 6000, 1),
			},
			want: []string{"start s1 GPU-0", "start s2 GPU-1", "start s3 GPU-1", "wait big no_memory"},
		},
		{
			name: "round-robin between users at equal priority",
			gpus: []placement.GPU{dev(0, 80000, 0)},
			queue: []placement.Job{
				job("a1", 1000, 1, owner("alice")), job("a2", 1000, 1, owner("alice")), job("a3", 1000, 1, owner("alice")),
				job("b1", 1000, 1, owner("bob")), job("b2", 1000, 1, owner("bob")),
				job("c1", 1000, 1, owner("carol")),
			},
			want: []string{"start a1 GPU-0", "start b1 GPU-0", "start c1 GPU-0", "start a2 GPU-0", "start b2 GPU-0", "start a3 GPU-0"},
		},
		{
			// Room for one: by Seq alone alice's next would go first, pass
			// after pass, and bob's one job wait behind all of hers.
			name: "round-robin: the user running fewer first",
			gpus: []placement.GPU{dev(0, 4096, 0)},
			queue: []placement.Job{
				job("a2", 2000, 1, owner("alice")), job("a3", 2000, 1, owner("alice")),
				job("b1", 2000, 1, owner("bob")),
			},
			served: map[string]placement.Served{"alice": {Running: 1}},
			want:   []string{"start b1 GPU-0", "wait a2 no_memory", "wait a3 no_memory"},
		},
		{
			name: "round-robin: within a round the user started least recently first",
			gpus: []placement.GPU{dev(0, 4096, 0)},
			queue: []placement.Job{
				job("a2", 2000, 1, owner("alice")), job("b2", 2000, 1, owner("bob")), job("c1", 2000, 1, owner("carol")),
			},
			served: map[string]placement.Served{"alice": {Last: now.Add(-time.Minute)}, "bob": {Last: now.Add(-time.Hour)}},
			want:   []string{"start c1 GPU-0", "wait b2 no_memory", "wait a2 no_memory"},
		},
		{
			name: "round-robin: then bob, started before alice",
			gpus: []placement.GPU{dev(0, 8192, 0)},
			queue: []placement.Job{
				job("a2", 3000, 1, owner("alice")), job("b2", 3000, 1, owner("bob")),
			},
			served: map[string]placement.Served{"alice": {Last: now.Add(-time.Minute)}, "bob": {Last: now.Add(-time.Hour)}},
			want:   []string{"start b2 GPU-0", "start a2 GPU-0"},
		},
		{
			name: "equal Seq: by ID",
			gpus: []placement.GPU{dev(0, 80000, 0)},
			queue: []placement.Job{
				job("b", 1000, 1, func(j *placement.Job) { j.Seq = 7 }),
				job("a", 1000, 1, func(j *placement.Job) { j.Seq = 7 }),
			},
			want: []string{"start a GPU-0", "start b GPU-0"},
		},
		{
			name:  "preemption frees the fewest bytes",
			gpus:  []placement.GPU{dev(0, 40000, 38000, victim("v1", 0, 19000), victim("v2", 0, 10000), victim("v3", 0, 7000), victim("v4", 1, 2000))},
			queue: []placement.Job{job("j", 10000, 1, prio(5))},
			want:  []string{"start j GPU-0 preempt v3,v4"},
		},
		{
			name:  "preemption up to 12 candidates: exact",
			opts:  func(o *placement.Options) { o.SpikeBuffer = 0 },
			gpus:  []placement.GPU{victims(45000, 5)},
			queue: []placement.Job{job("j", 22488, 1, prio(5))}, // 15000 short
			want:  []string{"start j GPU-0 preempt v01,v02,v03"},
		},
		{
			name:  "preemption above 12 candidates: largest first, then the smallest that covers the rest",
			opts:  func(o *placement.Options) { o.SpikeBuffer = 0 },
			gpus:  []placement.GPU{victims(80000, 12)},
			queue: []placement.Job{job("j", 22488, 1, prio(5))}, // 15000 short
			want:  []string{"start j GPU-0 preempt big,v01"},
		},
		{
			name: "preemption never for equal or lower base priority, aging or not",
			gpus: []placement.GPU{dev(0, 40000, 38000, victim("v1", 2, 19000), victim("v2", 3, 19000))},
			queue: []placement.Job{
				job("eq", 10000, 1, prio(2)),
				job("aged", 10000, 1, prio(1), age(2*time.Hour)),
			},
			want: []string{"wait aged no_memory", "wait eq no_memory"},
		},
		{
			name: "non-preemptible and external occupants are never chosen",
			gpus: []placement.GPU{dev(0, 40000, 38000,
				placement.Occupant{Kind: placement.Managed, ID: "np", UsedMiB: 9000, PeakMiB: 9000, DeclaredMiB: 9000},
				placement.Occupant{Kind: placement.External, ID: "x", UsedMiB: 9000, PeakMiB: 9000, Preemptible: true},
				victim("big", 0, 20000),
			)},
			queue: []placement.Job{job("j", 15000, 1, prio(5)), job("k", 15000, 1, prio(5))},
			want:  []string{"start j GPU-0 preempt big", "wait k no_memory"},
		},
		{
			name: "a job preempts only its own user's processes, unless it may preempt any",
			gpus: []placement.GPU{dev(0, 40000, 38000, victim("mine", 0, 19000), func() placement.Occupant {
				o := victim("theirs", 0, 15000)
				o.Owner = "other"
				return o
			}())},
			queue: []placement.Job{
				job("own", 17000, 1, prio(5)),
				job("root", 10000, 1, prio(5), func(j *placement.Job) { j.Owner, j.PreemptAny = "root", true }),
				job("greedy", 38000, 1, prio(9)),
			},
			want: []string{"start own GPU-0 preempt mine", "start root GPU-0 preempt theirs", "wait greedy no_memory"},
		},
		{
			name: "a victim on two GPUs frees both",
			opts: func(o *placement.Options) { o.SpikeBuffer = 0 },
			gpus: []placement.GPU{
				dev(0, 20000, 19000, victim("V", 0, 10000), ext("x0", 9000, 9000)),
				dev(1, 20000, 19000, victim("V", 0, 10000), ext("x1", 9000, 9000)),
				dev(2, 20000, 19000, victim("S2", 0, 15000), ext("x2", 4000, 4000)),
				dev(3, 20000, 19000, victim("S3", 0, 15000), ext("x3", 4000, 4000)),
			},
			queue: []placement.Job{job("j", 9000, 2, prio(1))},
			want:  []string{"start j GPU-0,GPU-1 preempt V"},
		},
		{
			name: "preemption makes a whole idle GPU for an undeclared job",
			gpus: []placement.GPU{
				dev(0, 20000, 1000, ext("x", 1000, 1000)),
				dev(1, 20000, 9000, victim("m1", 0, 5000), victim("m2", 1, 4000)),
			},
			queue: []placement.Job{job("u", 0, 1, prio(2))},
			want:  []string{"start u GPU-1 preempt m1,m2"},
		},
		{
			name: "pinned jobs only on their GPUs",
			gpus: []placement.GPU{dev(0, 40000, 20000, ext("x", 20000, 20000)), dev(1, 40000, 0), dev(2, 40000, 0)},
			queue: []placement.Job{
				job("p", 5000, 1, only(true, "GPU-1")),
				job("o", 5000, 1, only(false, "GPU-2", "GPU-1")),
				job("bad", 5000, 1, only(true, "GPU-0", "GPU-1")),
				job("gone", 5000, 1, only(true, "GPU-9")),
				job("free", 5000, 1),
			},
			want: []string{"start p GPU-1", "start o GPU-1", "start free GPU-0", "infeasible bad", "infeasible gone"},
			detail: map[string]string{
				"bad":  "pinned to 2 GPUs but needs 1",
				"gone": "pinned to GPU-9, which is not on this machine",
			},
		},
		{
			name: "reservation and lease charges",
			gpus: []placement.GPU{
				dev(0, 40000, 0,
					placement.Occupant{Kind: placement.Reservation, ID: "r", DeclaredMiB: 20000},
					placement.Occupant{Kind: placement.Lease, ID: "l", DeclaredMiB: 10000}),
				dev(1, 40000, 0, placement.Occupant{Kind: placement.Lease, ID: "x", Exclusive: true}),
				dev(2, 40000, 0, placement.Occupant{Kind: placement.Lease, ID: "y"}),
			},
			queue: []placement.Job{job("a", 9489, 1), job("b", 9488, 1)},
			want:  []string{"start b GPU-0", "wait a no_memory"},
			detail: map[string]string{
				"a": "needs 9489+512 MiB on 1 GPU; most headroom: GPU 0 10000 MiB",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := placement.DefaultOptions()
			if c.opts != nil {
				c.opts(&opts)
			}
			queue := slices.Clone(c.queue)
			for i := range queue {
				if queue[i].Seq == 0 {
					queue[i].Seq = uint64(i + 1)
				}
			}
			plan := placement.Place(placement.Snapshot{Now: now, GPUs: c.gpus, Options: opts, Served: c.served}, queue)
			if got := render(plan); !slices.Equal(got, c.want) {
				t.Errorf("plan:\n got  %q\n want %q", got, c.want)
			}
			if c.reserved != nil && !maps.Equal(plan.Reserved, c.reserved) {
				t.Errorf("reserved %v, want %v", plan.Reserved, c.reserved)
			}
			for _, w := range slices.Concat(plan.Waits, plan.Infeasible) {
				if d, ok := c.detail[w.JobID]; ok && w.Detail != d {
					t.Errorf("%s detail:\n got  %q\n want %q", w.JobID, w.Detail, d)
				}
			}
		})
	}
}

// starveGPUs: GPU 0 has 7000 MiB headroom and 40000 once its external
// process goes; GPU 1 has 13000 headroom and 35000 at most (a permanent
// filler).
func starveGPUs() []placement.GPU {
	return []placement.GPU{
		dev(0, 40000, 30000, ext("x", 30000, 30000)),
		dev(1, 40000, 25000,
			placement.Occupant{Kind: placement.Filler, ID: "f", UsedMiB: 5000, Permanent: true},
			ext("y", 20000, 20000)),
	}
}

// victims is a GPU of total MiB with 8000 MiB headroom: one preemptible
// process of 12000 MiB and n of 5000.
func victims(total uint64, n int) placement.GPU {
	g := dev(0, total, total-8000, victim("big", 0, 12000))
	for k := 1; k <= n; k++ {
		g.Occupants = append(g.Occupants, victim(fmt.Sprintf("v%02d", k), 0, 5000))
	}
	return g
}

func TestPlaceLeavesInputAlone(t *testing.T) {
	gpus := []placement.GPU{dev(1, 40000, 30000, victim("v", 0, 30000)), dev(0, 40000, 0)}
	queue := []placement.Job{job("b", 30000, 2, prio(3)), job("a", 1000, 1)}
	queue[0].Seq, queue[1].Seq = 2, 1
	snap := placement.Snapshot{Now: now, GPUs: gpus, Options: placement.DefaultOptions()}
	wantGPUs, wantQueue := fmt.Sprintf("%+v", gpus), fmt.Sprintf("%+v", queue)
	placement.Place(snap, queue)
	if fmt.Sprintf("%+v", gpus) != wantGPUs || fmt.Sprintf("%+v", queue) != wantQueue {
		t.Error("Place modified its input")
	}
}

func TestPlaceEmpty(t *testing.T) {
	got := placement.Place(placement.Snapshot{Now: now}, nil)
	want := placement.Plan{Starts: []placement.Start{}, Waits: []placement.Wait{}, Infeasible: []placement.Wait{}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want empty non-nil lists", got)
	}
}
