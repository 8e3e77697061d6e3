package placement_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpusched/gpusched/internal/placement"
)

// genWorld draws a snapshot and a queue small enough to be shrunk.
func genWorld(t *rapid.T) (placement.Snapshot, []placement.Job) {
	opts := placement.Options{
		MarginMiB:      rapid.SampledFrom([]uint64{0, 512}).Draw(t, "margin"),
		SpikeBuffer:    rapid.SampledFrom([]float64{0, 0.1, 0.25}).Draw(t, "spike"),
		AgingStep:      rapid.SampledFrom([]time.Duration{0, 10 * time.Minute}).Draw(t, "aging"),
		StarveAfter:    rapid.SampledFrom([]time.Duration{0, 30 * time.Minute}).Draw(t, "starve"),
		MinFreeMiB:     rapid.SampledFrom([]uint64{0, 0, 4000}).Draw(t, "minFree"),
		MaxUtilPercent: rapid.SampledFrom([]int{0, 0, 80}).Draw(t, "maxUtil"),
		MaxPowerWatts:  rapid.SampledFrom([]float64{0, 0, 250}).Draw(t, "maxPower"),
		MaxTempC:       rapid.SampledFrom([]int{0, 0, 85}).Draw(t, "maxTemp"),
	}
	gpus := make([]placement.GPU, rapid.IntRange(1, 5).Draw(t, "gpus"))
	var uuids []string
	for i := range gpus {
		g := &gpus[i]
		g.Index, g.UUID = i, fmt.Sprintf("GPU-%d", i)
		g.TotalMiB = rapid.SampledFrom([]uint64{8000, 16000, 24000}).Draw(t, "total")
		if rapid.Bool().Draw(t, "hasUtil") {
			g.UtilPercent = ptr(rapid.IntRange(0, 100).Draw(t, "util"))
		}
		if rapid.Bool().Draw(t, "hasPower") {
			g.PowerWatts = ptr(float64(rapid.IntRange(50, 350).Draw(t, "power")))
		}
		if rapid.Bool().Draw(t, "hasTemp") {
			g.TempC = ptr(rapid.IntRange(30, 100).Draw(t, "temp"))
		}
		if rapid.IntRange(0, 5).Draw(t, "ban") == 0 {
			opts.Banned = append(opts.Banned, g.UUID)
		}
		uuids = append(uuids, g.UUID)
	}
	kinds := []placement.OccupantKind{placement.Managed, placement.Managed, placement.External,
		placement.Reservation, placement.Filler, placement.Lease, placement.Frozen}
	for p := range rapid.IntRange(0, 8).Draw(t, "procs") {
		o := placement.Occupant{
			Kind:        rapid.SampledFrom(kinds).Draw(t, "kind"),
			ID:          fmt.Sprintf("p%d", p),
			Priority:    rapid.IntRange(0, 4).Draw(t, "prio"),
			Preemptible: rapid.Bool().Draw(t, "preemptible"),
			Owner:       rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "powner"),
			Permanent:   rapid.IntRange(0, 3).Draw(t, "permanent") == 0,
			Exclusive:   rapid.IntRange(0, 5).Draw(t, "exclusive") == 0,
		}
		on := rapid.Permutation(gpus).Draw(t, "on")[:rapid.IntRange(1, len(gpus)).Draw(t, "span")]
		for _, d := range on {
			o.UsedMiB = rapid.Uint64Range(0, 6000).Draw(t, "used")
			o.PeakMiB = o.UsedMiB + rapid.Uint64Range(0, 2000).Draw(t, "peak")
			o.DeclaredMiB = rapid.SampledFrom([]uint64{0, o.UsedMiB, o.UsedMiB + 1000}).Draw(t, "declared")
			g := &gpus[d.Index]
			g.Occupants = append(g.Occupants, o)
			g.UsedMiB += o.UsedMiB
		}
	}
	for i := range gpus {
		gpus[i].UsedMiB += rapid.Uint64Range(0, 800).Draw(t, "unattributed")
	}
	queue := make([]placement.Job, rapid.IntRange(0, 12).Draw(t, "jobs"))
	for k := range queue {
		j := &queue[k]
		j.ID, j.Seq = fmt.Sprintf("j%d", k), uint64(k+1)
		j.Owner = rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "owner")
		j.Priority = rapid.IntRange(0, 4).Draw(t, "jprio")
		j.PreemptAny = rapid.IntRange(0, 3).Draw(t, "preemptAny") == 0
		j.QueuedAt = now.Add(-time.Duration(rapid.IntRange(0, 90).Draw(t, "age")) * time.Minute)
		j.GPUs = rapid.IntRange(1, 3).Draw(t, "jgpus")
		j.VRAMMiB = rapid.SampledFrom([]uint64{0, 1000, 3000, 6000, 12000, 20000}).Draw(t, "vram")
		if rapid.IntRange(0, 3).Draw(t, "hasOnly") == 0 {
			all := append(slices.Clone(uuids), "GPU-9")
			j.Only = rapid.Permutation(all).Draw(t, "only")[:rapid.IntRange(1, len(all)).Draw(t, "onlyN")]
			j.Pinned = rapid.Bool().Draw(t, "pinned")
		}
		if rapid.IntRange(0, 4).Draw(t, "ownLimits") == 0 {
			j.MinFreeMiB = rapid.SampledFrom([]uint64{0, 8000}).Draw(t, "jminFree")
			j.MaxUtilPercent = rapid.SampledFrom([]int{0, 50}).Draw(t, "jmaxUtil")
			j.MaxPowerWatts = rapid.SampledFrom([]float64{0, 150}).Draw(t, "jmaxPower")
			j.MaxTempC = rapid.SampledFrom([]int{0, 60}).Draw(t, "jmaxTemp")
		}
	}
	served := map[string]placement.Served{}
	for _, o := range []string{"a", "b", "c"} {
		if rapid.Bool().Draw(t, "served") {
			served[o] = placement.Served{Running: rapid.IntRange(0, 3).Draw(t, "running"),
				Last: now.Add(-time.Duration(rapid.IntRange(0, 3).Draw(t, "lastStart")) * time.Minute)}
		}
	}
	return placement.Snapshot{Now: now, GPUs: gpus, Options: opts, Served: served}, queue
}

// refCharge restates the charging rules.
func refCharge(o placement.Occupant, total uint64, spike float64) uint64 {
	peak := max(o.PeakMiB, o.UsedMiB)
	spiked := peak + uint64(math.Ceil(float64(peak)*spike-1e-6))
	switch {
	case o.Kind == placement.Frozen:
		return 0
	case o.Kind == placement.Reservation:
		return o.DeclaredMiB
	case o.Kind == placement.Filler:
		return o.UsedMiB
	case o.Kind == placement.Lease && (o.Exclusive || o.DeclaredMiB == 0):
		return total
	case o.Kind == placement.Lease:
		return o.DeclaredMiB
	case o.Kind == placement.Managed && o.Exclusive:
		return total
	case o.Kind == placement.Managed && o.DeclaredMiB > 0 && peak <= o.DeclaredMiB:
		return o.DeclaredMiB
	}
	return spiked
}

// refHealthy restates the filters that decide where a job may go.
func refHealthy(o placement.Options, j placement.Job, g placement.GPU) bool {
	limit := func(a, b float64) float64 {
		if a == 0 || (b != 0 && b < a) {
			return b
		}
		return a
	}
	util := limit(float64(o.MaxUtilPercent), float64(j.MaxUtilPercent))
	power := limit(o.MaxPowerWatts, j.MaxPowerWatts)
	temp := limit(float64(o.MaxTempC), float64(j.MaxTempC))
	switch {
	case slices.Contains(o.Banned, g.UUID), len(j.Only) > 0 && !slices.Contains(j.Only, g.UUID):
		return false
	case g.TotalMiB-min(g.UsedMiB, g.TotalMiB) < max(o.MinFreeMiB, j.MinFreeMiB):
		return false
	case util > 0 && g.UtilPercent != nil && float64(*g.UtilPercent) > util:
		return false
	case power > 0 && g.PowerWatts != nil && *g.PowerWatts > power:
		return false
	case temp > 0 && g.TempC != nil && float64(*g.TempC) > temp:
		return false
	}
	return true
}

func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, queue := genWorld(t)
		plan := placement.Place(snap, queue)
		jobs := map[string]placement.Job{}
		for _, j := range queue {
			jobs[j.ID] = j
		}
		occ := map[string]placement.Occupant{}
		for _, g := range snap.GPUs {
			for _, o := range g.Occupants {
				occ[o.ID] = o
			}
		}

		// (d) every job exactly once, with a reason when it waits.
		seen := map[string]int{}
		for _, s := range plan.Starts {
			seen[s.JobID]++
		}
		for _, w := range plan.Waits {
			seen[w.JobID]++
			if w.Reason == placement.ReasonInfeasible || w.Detail == "" {
				t.Fatalf("wait %+v", w)
			}
		}
		for _, w := range plan.Infeasible {
			seen[w.JobID]++
			if w.Reason != placement.ReasonInfeasible || w.Detail == "" {
				t.Fatalf("infeasible %+v", w)
			}
		}
		for _, j := range queue {
			if seen[j.ID] != 1 {
				t.Fatalf("job %s appears %d times", j.ID, seen[j.ID])
			}
		}

		byUUID := map[string]placement.GPU{}
		for _, g := range snap.GPUs {
			byUUID[g.UUID] = g
		}
		victims := map[string]bool{}
		declared := map[string]uint64{} // per GPU: declared MiB started
		whole := map[string]int{}       // per GPU: undeclared jobs started
		starts := map[string]int{}
		starters := map[string]map[string]bool{} // per GPU: owners of the jobs started
		for _, s := range plan.Starts {
			j := jobs[s.JobID]
			// (f) exactly GPUs distinct GPUs; (b) each one allowed and healthy.
			if len(s.GPUs) != j.GPUs || len(slices.Compact(slices.Sorted(slices.Values(s.GPUs)))) != j.GPUs {
				t.Fatalf("%s wants %d GPUs, got %v", j.ID, j.GPUs, s.GPUs)
			}
			for _, u := range s.GPUs {
				if !refHealthy(snap.Options, j, byUUID[u]) {
					t.Fatalf("%s placed on filtered %s", j.ID, u)
				}
				starts[u]++
				if j.VRAMMiB == 0 {
					whole[u]++
				}
				declared[u] += j.VRAMMiB
				if starters[u] == nil {
					starters[u] = map[string]bool{}
				}
				starters[u][j.Owner] = true
			}
			// (e) victims: preemptible managed, of lower base priority, of
			// the job's own user unless it may preempt any, once.
			if !slices.IsSorted(s.Preempt) {
				t.Fatalf("preempt list not sorted: %v", s.Preempt)
			}
			for _, id := range s.Preempt {
				o := occ[id]
				if o.Kind != placement.Managed || !o.Preemptible || o.Priority >= j.Priority || victims[id] ||
					!j.PreemptAny && o.Owner != j.Owner {
					t.Fatalf("%s (priority %d) preempts %+v", j.ID, j.Priority, o)
				}
				victims[id] = true
			}
		}

		// (a) never oversubscribe.
		for _, g := range snap.GPUs {
			if starts[g.UUID] == 0 {
				continue
			}
			var load, used uint64
			for _, o := range g.Occupants {
				used += o.UsedMiB
				// A filler hands its memory over to its owner's jobs.
				if !victims[o.ID] && !(o.Kind == placement.Filler && starters[g.UUID][o.Owner]) {
					load += refCharge(o, g.TotalMiB, snap.Options.SpikeBuffer)
				}
			}
			unattributed := g.UsedMiB - min(used, g.UsedMiB)
			if whole[g.UUID] > 0 {
				if starts[g.UUID] != 1 || load != 0 || unattributed > snap.Options.MarginMiB {
					t.Fatalf("%s: undeclared job beside %d starts, %d MiB charged, %d unattributed", g.UUID, starts[g.UUID], load, unattributed)
				}
				continue
			}
			if sum := load + unattributed + declared[g.UUID] + snap.Options.MarginMiB; sum > g.TotalMiB {
				t.Fatalf("%s oversubscribed: %d MiB of %d", g.UUID, sum, g.TotalMiB)
			}
		}

		// (c) determinism, whatever the order of GPUs, occupants and queue.
		if again := placement.Place(snap, queue); !reflect.DeepEqual(plan, again) {
			t.Fatalf("second pass differs:\n%+v\n%+v", plan, again)
		}
		shuffled := snap
		shuffled.GPUs = rapid.Permutation(snap.GPUs).Draw(t, "gpuOrder")
		for i := range shuffled.GPUs {
			shuffled.GPUs[i].Occupants = rapid.Permutation(shuffled.GPUs[i].Occupants).Draw(t, "occOrder")
		}
		if again := placement.Place(shuffled, rapid.Permutation(queue).Draw(t, "queueOrder")); !reflect.DeepEqual(plan, again) {
			t.Fatalf("shuffled input gives another plan:\n%+v\n%+v", plan, again)
		}
	})
}
