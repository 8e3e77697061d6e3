package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/thawqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// admit reserves need (MiB per GPU UUID) for a thaw of rec's once every
// GPU has it free beyond the margin (thawqueue: in turn with the other
// thaws waiting), counting what the owner's fillers would hand over as
// free; they hand it over before admit returns. With wait 0 it answers at
// once; otherwise it waits up to wait for memory to free. The returned
// func releases the reservation.
func (d *Daemon) admit(ctx context.Context, what string, rec proctable.Record, need map[string]uint64, wait time.Duration) (func(), error) {
	r := thawRequest(rec, need)
	r.Line = d.lastJobSeq()
	release, err := d.thaws.Admit(ctx, r, wait)
	var missing *thawqueue.Missing
	var noRoom *thawqueue.NoRoom
	switch {
	case errors.As(err, &missing):
		return nil, api.Errorf(api.CodeUnavailable, "%s", missing)
	case errors.As(err, &noRoom) && noRoom.Expired:
		return nil, api.Errorf(api.CodeTimeout, "%s: waited %v for GPU memory: %s", what, wait, noRoom.Why)
	case errors.As(err, &noRoom):
		return nil, api.Errorf(api.CodeResourceExhausted, "%s: %s (pass a timeout to wait for memory)", what, noRoom.Why)
	case err != nil:
		return nil, err
	}
	handedOver := d.handOver(context.WithoutCancel(ctx), rec.Owner.UID, need)
	return func() { handedOver(); release() }, nil
}

// thawRequest is a thaw of rec's needing need, as the thaw queue takes it.
func thawRequest(rec proctable.Record, need map[string]uint64) thawqueue.Request {
	return thawqueue.Request{UID: rec.Owner.UID, Owner: rec.Owner.User, Proc: rec.ID, Priority: rec.Policy.Priority, Need: need}
}

// thawGPUs is the latest GPU sample as the thaw queue reads it, with the
// memory promised on each GPU and not used yet: what each granted lease
// holds there (its min_free) and each starting or running job's
// declaration, less what they use. Placement charges both whole
// (docs/queue.md); a thaw that took that memory would leave the lease's
// holder, or the job, short. A lease or job that declared nothing was
// given whole idle GPUs, which frozen processes parked there leave idle:
// it promises nothing to their thaws (a user's exclusive lease taking the
// GPU another froze on would otherwise keep them from thawing back for as
// long as it is held). And the GPUs placement's last pass held for
// starving work (Reserved).
type thawGPUs struct {
	d        *Daemon
	gv       *gpuView
	promised map[string]uint64            // GPU UUID -> MiB
	own      map[string]map[string]uint64 // process ID -> its job's part of promised
	reserved map[string]string            // GPU UUID -> the starving request placement holds it for
	started  map[string]bool              // waiting thaws placement kept room for
}

func (d *Daemon) thawGPUs() thawqueue.GPUs {
	last := d.sched.reasons.Load()
	g := thawGPUs{d: d, gv: d.gpuView(), promised: map[string]uint64{}, own: map[string]map[string]uint64{},
		reserved: last.reserved, started: last.started}
	for _, l := range d.leases.granted() {
		for _, uuid := range l.uuids {
			g.promised[uuid] += free(l.mib, l.used[uuid])
		}
	}
	tv := d.table.View()
	for _, j := range d.jobs.Active() {
		a := j.Current()
		if a == nil || j.VRAMMiB == 0 || j.State != api.JobStarting && j.State != api.JobRunning {
			continue
		}
		if r, ok := tv.Get(jobProcKey(j)); ok && r.ID == j.Proc && !usingGPU(r.State) {
			continue // frozen (preempted), being thawed (admitted already) or ended
		}
		for _, uuid := range a.GPUs {
			mib := free(j.VRAMMiB, g.gv.usage[j.Proc][uuid])
			g.promised[uuid] += mib
			if g.own[j.Proc] == nil {
				g.own[j.Proc] = map[string]uint64{}
			}
			g.own[j.Proc][uuid] += mib
		}
	}
	return g
}

// usingGPU reports whether a job's process in state s holds its
// declaration on its GPUs.
func usingGPU(s api.State) bool {
	return s == api.StateStarting || s == api.StateRunning || s == api.StateFreezing
}

func (g thawGPUs) Device(uuid string) (totalMiB, usedMiB uint64, index int, ok bool) {
	dev, ok := g.gv.device(uuid)
	return dev.TotalMiB, dev.UsedMiB, dev.Index, ok
}

// Reserved names the starving queued job (or preempted process waiting to
// be thawed back, or lease asked for) that placement holds uuid for, where
// it is not r's own and placement did not keep room for r (the seq-th
// thaw, waiting) ahead of it in the pass. A waiting thaw's hold is the
// thaw queue's own.
func (g thawGPUs) Reserved(uuid string, r thawqueue.Request, seq uint64) string {
	id := g.reserved[uuid]
	switch {
	case id == "", strings.HasPrefix(id, waitPrefix), g.started[waitID(seq)]:
		return ""
	case strings.HasPrefix(id, thawPrefix):
		key, _ := proctable.ParseKey(strings.TrimPrefix(id, thawPrefix))
		if rec, ok := g.d.table.Get(key); ok && rec.ID != r.Proc {
			return fmt.Sprintf("the thaw back of %s, preempted and starving", key)
		}
		return ""
	case strings.HasPrefix(id, leasePrefix):
		return fmt.Sprintf("a starving lease (%s)", strings.TrimPrefix(id, leasePrefix))
	}
	if j, ok := g.d.jobs.Get(id); ok && j.Proc != r.Proc {
		return fmt.Sprintf("starving job %s (%s of %s)", id, j.Name, j.Owner.User)
	}
	return ""
}

func (g thawGPUs) Held(uuid string, r thawqueue.Request) uint64 {
	return g.promised[uuid] - g.own[r.Proc][uuid]
}

func (g thawGPUs) Yield(uuid string, uid uint32) uint64 { return g.d.fillerYield(uuid, uid) }
