package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/thawqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// Placement ids of requests that are not queued jobs.
const (
	thawPrefix  = "thaw:"  // + process key: a preempted process to thaw back
	leasePrefix = "lease:" // + lease id: a lease being acquired
)

// placementInput builds one pass's immutable snapshot and queue from the
// latest GPU sample, the process table, the jobs, the leases, the thaws
// admitted but not yet seen on the GPUs (thawsHeld) and those waiting for
// memory, and what each user was served. The queue leaves out the jobs of
// users at --max-procs-per-user: room says why they wait, and counts the
// pass's starts against the cap. The queue is built in buf's array when it
// is large enough.
func (d *Daemon) placementInput(now time.Time, buf []placement.Job, thawsHeld map[string]uint64, thawsWaiting []thawqueue.Waiter) (placement.Snapshot, []placement.Job, *procRoom) {
	gv := d.gpuView()
	tv := d.table.View()
	jobs := d.jobs.View()
	active := map[string]*jobqueue.Job{} // record id -> job of its current attempt
	for _, j := range jobs {
		if j.Active() && j.Proc != "" {
			active[j.Proc] = j
		}
	}
	byID := make(map[string]*proctable.Record, len(tv.Records))
	for _, r := range tv.Records {
		byID[r.ID] = r
	}
	gpus := make([]placement.GPU, len(gv.devices))
	at := map[string]int{}
	for i, dv := range gv.devices {
		gpus[i] = placement.GPU{Index: dv.Index, UUID: dv.UUID, TotalMiB: dv.TotalMiB, UsedMiB: dv.UsedMiB,
			UtilPercent: dv.UtilPercent, PowerWatts: dv.PowerWatts, TempC: dv.TempC, Occupants: []placement.Occupant{}}
		at[dv.UUID] = i
		if gv.lost[dv.UUID] != "" {
			// A lost GPU stays in the snapshot, so that a job needing it
			// waits rather than being found infeasible, but full: an
			// external holder of all its memory, which nothing preempts.
			gpus[i].UsedMiB = dv.TotalMiB
			gpus[i].Occupants = append(gpus[i].Occupants, placement.Occupant{Kind: placement.External, ID: "lost:" + dv.UUID,
				Name: fmt.Sprintf("GPU %d lost", dv.Index), PeakMiB: dv.TotalMiB})
		}
	}
	add := func(uuid string, o placement.Occupant) {
		if i, ok := at[uuid]; ok {
			gpus[i].Occupants = append(gpus[i].Occupants, o)
		}
	}
	// Memory the sample still shows for trees that have since exited or
	// been frozen is gone: drop it, so an exit frees its GPU at once.
	for id, per := range gv.usage {
		if r, ok := byID[id]; !ok || !onGPU(r.State) {
			for uuid, mib := range per {
				if i, ok := at[uuid]; ok {
					gpus[i].UsedMiB -= min(mib, gpus[i].UsedMiB)
				}
			}
		}
	}
	fillerPIDs := d.fillers.pids()
	var extPIDs []int
	for _, pu := range gv.procs {
		if gv.owner[pu.PID] == "" && fillerPIDs[pu.PID] == "" {
			extPIDs = append(extPIDs, pu.PID)
		}
	}
	leaseOf := d.leases.owners(extPIDs)
	d.leases.resetUsage()
	d.sched.mu.Lock()
	for _, r := range tv.Records {
		j := active[r.ID]
		switch {
		case !r.Live():
		case !onGPU(r.State):
			vram := r.Checkpoint.VRAM()
			for _, uuid := range sortedKeys(vram) {
				add(uuid, placement.Occupant{Kind: placement.Frozen, ID: r.Key().String(), Name: r.Name, DeclaredMiB: vram[uuid]})
			}
		case j != nil:
			for _, uuid := range r.GPUs {
				add(uuid, d.jobOccupant(j, gv.usage[r.ID][uuid], d.sched.peaks[r.ID][uuid], r.State == api.StateRunning))
			}
		default:
			for _, uuid := range sortedKeys(d.sched.peaks[r.ID]) {
				if !slices.Contains(r.GPUs, uuid) && gv.usage[r.ID][uuid] == 0 {
					continue // a GPU it has left (migrated): its peak there is history
				}
				add(uuid, placement.Occupant{Kind: placement.Managed, ID: r.Key().String(), Name: r.Name,
					UsedMiB: gv.usage[r.ID][uuid], PeakMiB: d.sched.peaks[r.ID][uuid], Priority: r.Policy.Priority})
			}
		}
	}
	// Attempts being started have no process yet, or one too new to show:
	// they hold their whole declaration.
	for _, j := range jobs {
		if j.State != api.JobStarting {
			continue
		}
		if r, ok := byID[j.Proc]; ok && r.Live() {
			continue
		}
		for _, uuid := range j.Current().GPUs {
			add(uuid, d.jobOccupant(j, 0, 0, false))
		}
	}
	for _, pu := range gv.procs {
		if gv.owner[pu.PID] != "" || fillerPIDs[pu.PID] != "" {
			continue
		}
		if id, ok := leaseOf[pu.PID]; ok {
			d.leases.observe(id, pu.UUID, pu.UsedMiB)
			continue
		}
		add(pu.UUID, placement.Occupant{Kind: placement.External, ID: "pid:" + strconv.Itoa(pu.PID),
			Name: fmt.Sprintf("pid %d", pu.PID), UsedMiB: pu.UsedMiB, PeakMiB: d.sched.extPeaks[pu.PID][pu.UUID]})
	}
	served := map[string]placement.Served{}
	for user, at := range d.sched.served {
		served[user] = placement.Served{Last: at}
	}
	d.sched.mu.Unlock()
	held, asked := d.leases.snapshot()
	running := func(user string) {
		s := served[user]
		s.Running++
		served[user] = s
	}
	for _, j := range jobs {
		if j.State == api.JobStarting || j.State == api.JobRunning {
			running(j.Owner.User)
		}
	}
	for _, l := range held {
		running(l.user)
		for _, uuid := range l.uuids {
			add(uuid, placement.Occupant{Kind: placement.Lease, ID: leasePrefix + l.id, Name: "lease " + l.id,
				UsedMiB: l.used[uuid], PeakMiB: l.peak[uuid], DeclaredMiB: l.mib, Exclusive: l.mib == 0, Priority: l.priority})
		}
	}
	for _, f := range d.fillers.all() {
		add(f.rec.UUID, placement.Occupant{Kind: placement.Filler, ID: "filler:" + f.rec.UUID, Name: "the filler of " + f.rec.Owner.User,
			UsedMiB: d.fillerHeld(f, gv), Owner: f.rec.Owner.User})
	}
	for uuid, mib := range thawsHeld {
		add(uuid, placement.Occupant{Kind: placement.Reservation, ID: "thaw-admission", Name: "thaws in progress", DeclaredMiB: mib})
	}

	room := d.newProcRoom(tv, jobs)
	queue := slices.Grow(buf[:0], len(jobs))
	for _, j := range jobs {
		if j.State == api.JobQueued && !room.hold(j) {
			queue = append(queue, placement.Job{ID: j.ID, Owner: j.Owner.User, Priority: j.Priority, Seq: j.Seq << seqShift,
				QueuedAt: j.SubmittedAt, GPUs: j.GPUs, VRAMMiB: j.VRAMMiB, PreemptAny: j.Owner.UID == 0})
		}
	}
	queue = append(queue, d.preemptedQueue(tv, active)...)
	queue = append(queue, asked...)
	queue = append(queue, waitingThaws(thawsWaiting)...)
	return placement.Snapshot{Now: now, GPUs: gpus, Options: d.placementOptions(gv), Served: served}, queue, room
}

// seqShift makes room below each job's sequence number for the leases
// asked for after it.
const seqShift = 20

// jobOccupant is a job's attempt on one GPU: its process, by key.
func (d *Daemon) jobOccupant(j *jobqueue.Job, used, peak uint64, running bool) placement.Occupant {
	return placement.Occupant{Kind: placement.Managed, ID: jobProcKey(j).String(), Name: j.Name, UsedMiB: used, PeakMiB: peak, Owner: j.Owner.User,
		DeclaredMiB: j.VRAMMiB, Exclusive: j.VRAMMiB == 0, Priority: j.Priority, Preemptible: j.Preemptible && running && !j.MPS()}
}

// preemptedQueue asks placement to thaw back each process preemption
// froze, where it was, at its job's priority and place in line.
func (d *Daemon) preemptedQueue(tv *proctable.View, active map[string]*jobqueue.Job) []placement.Job {
	var out []placement.Job
	for _, r := range tv.Records {
		if r.PreemptedBy == "" || onGPU(r.State) || !r.Live() || d.sched.busy(d.sched.resuming, r.Key().String()) {
			continue
		}
		vram := r.Checkpoint.VRAM()
		pj := placement.Job{ID: thawPrefix + r.Key().String(), Owner: r.Owner.User, Priority: r.Policy.Priority,
			Only: sortedKeys(vram), Pinned: true}
		if j := active[r.ID]; j != nil {
			pj.Priority, pj.Seq, pj.QueuedAt, pj.VRAMMiB = j.Priority, j.Seq<<seqShift, j.SubmittedAt, j.VRAMMiB
		}
		for _, mib := range vram {
			pj.VRAMMiB = max(pj.VRAMMiB, mib)
		}
		pj.GPUs = len(pj.Only)
		if pj.GPUs == 0 {
			continue
		}
		out = append(out, pj)
	}
	return out
}

// placementOptions are the configured rules and health filters; a GPU in
// MIG mode counts as banned.
func (d *Daemon) placementOptions(gv *gpuView) placement.Options {
	o := placement.Options{MarginMiB: d.cfg.JobMarginMiB, SpikeBuffer: d.cfg.SpikeBuffer, AgingStep: d.cfg.AgingStep,
		StarveAfter: d.cfg.StarveAfter, MinFreeMiB: d.cfg.MinFreeMiB, MaxUtilPercent: d.cfg.MaxUtilPercent,
		MaxPowerWatts: d.cfg.MaxPowerWatts, MaxTempC: d.cfg.MaxTempC}
	for _, dv := range gv.devices {
		if bannedGPU(&d.cfg, dv) || dv.MIG {
			o.Banned = append(o.Banned, dv.UUID)
		}
	}
	return o
}

// reasonStaleGPUs: no GPU sample is fresh, so nothing is placed.
const reasonStaleGPUs placement.Reason = "stale_gpu_data"

// staleWaits is why every queued request waits when the last GPU sample
// failed: placing on stale data could oversubscribe a GPU. ok is false when
// the data is fresh.
func staleWaits(gv *gpuView, queue []placement.Job) ([]placement.Wait, bool) {
	if gv.stale == "" {
		return nil, false
	}
	detail := fmt.Sprintf("GPU sampling fails since %s (%s); nothing is placed until a sample succeeds", gv.staleSince.Format(time.RFC3339), gv.stale)
	out := make([]placement.Wait, len(queue))
	for i, j := range queue {
		out[i] = placement.Wait{JobID: j.ID, Reason: reasonStaleGPUs, Detail: detail}
	}
	return out, true
}

// lostWhy is what every wait adds while GPUs are lost: why they count as
// full ("" when none is lost).
func lostWhy(gv *gpuView) string {
	var why []string
	for _, dv := range gv.devices {
		if w := gv.lost[dv.UUID]; w != "" {
			why = append(why, w)
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "; lost, counted as full: " + strings.Join(why, "; ")
}

// onGPU reports whether a live process in state s may hold GPU memory.
func onGPU(s api.State) bool {
	switch s {
	case api.StateFrozen, api.StateHibernating, api.StateHibernated, api.StateRestoring, api.StateExited:
		return false
	}
	return true
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
