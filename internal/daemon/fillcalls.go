package daemon

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// fill holds a GPU's total memory usage at a target with a filler of the
// caller's, or changes the target of the caller's filler there. It returns
// once the helper holds what it can of the target.
func (d *Daemon) fill(c *call) (any, error) {
	var p api.FillParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if p.GPU == nil {
		return nil, invalidf("fill: gpu is required (an index or a UUID)")
	}
	uuids, err := d.usableGPUs("fill", p.GPU, nil)
	if err != nil {
		return nil, err
	}
	target, err := d.fillTarget("fill", uuids[0], p.Ratio, p.MiB)
	if err != nil {
		return nil, err
	}
	owner := proctable.Owner{UID: c.actor.UID, GID: c.actor.GID, Groups: c.actor.Groups, User: c.actor.User}
	if err := d.checkFillShare(owner, "fill", uuids[0], target); err != nil {
		return nil, err
	}
	f := newFiller(fillerRecord{UUID: uuids[0], Owner: owner, Ratio: p.Ratio,
		TargetMiB: target, Session: p.Session, CreatedAt: time.Now()})
	ctx := context.WithoutCancel(c.ctx)
	if old, added := d.fillers.add(f); !added {
		return d.refill(ctx, c, old, p, target)
	}
	f.mu.Lock()
	err = d.spawnFiller(ctx, f)
	if err == nil {
		d.chargeHelperStart(owner.UID, f.rec.PID)
		err = d.fillers.store.Put(f.rec.UUID, f.rec)
	}
	f.unlock()
	if err != nil {
		_ = d.releaseFiller(ctx, f, "it failed to start")
		return nil, err
	}
	if p.Session {
		created := f.rec.CreatedAt
		c.conn.onClose(func() {
			if cur := d.fillers.get(f.rec.UUID); cur == f && cur.rec.CreatedAt.Equal(created) {
				_ = d.releaseFiller(context.Background(), f, "its session closed")
			}
		})
	}
	return d.publishFiller(f), nil
}

// refill changes the target of the filler already on the GPU: the caller's
// own (or any, for root), and not one attached to a process.
func (d *Daemon) refill(ctx context.Context, c *call, f *filler, p api.FillParams, target uint64) (any, error) {
	if err := d.retarget(ctx, c, f, p, target); err != nil {
		return nil, err
	}
	return d.publishFiller(f), nil
}

// retarget applies a new target to f, checking first that the caller may.
func (d *Daemon) retarget(ctx context.Context, c *call, f *filler, p api.FillParams, target uint64) error {
	f.mu.Lock()
	defer f.unlock()
	index := d.gpuView().index[f.rec.UUID]
	switch {
	case !c.actor.owns(f.rec.Owner.UID):
		return conflictf("fill: GPU %d is already filled by %s", index, f.rec.Owner.User)
	case f.rec.Process != "":
		return conflictf("fill: GPU %d's filler is attached to a process; unfill it first", index)
	case p.Session != f.rec.Session:
		return conflictf("fill: GPU %d already has a filler; change its target with the same session setting, or unfill it first", index)
	}
	if err := d.checkFillShare(f.rec.Owner, "fill", f.rec.UUID, target); err != nil {
		return err // root changing a user's filler: the user's cap
	}
	f.rec.Ratio, f.rec.TargetMiB = p.Ratio, target
	if err := d.fillers.store.Put(f.rec.UUID, f.rec); err != nil {
		return err
	}
	return d.applyFiller(ctx, f)
}

// fillTarget checks a fill request's amount and turns it into MiB of the
// GPU's total.
func (d *Daemon) fillTarget(what, uuid string, ratio float64, size api.VRAM) (uint64, error) {
	dev, ok := d.gpuView().device(uuid)
	if !ok {
		return 0, api.Errorf(api.CodeUnavailable, "%s: GPU %s is not present", what, uuid)
	}
	switch {
	case size.Auto:
		return 0, invalidf("%s: mib must be a size like \"20G\", not auto", what)
	case (ratio != 0) == (size.MiB != 0):
		return 0, invalidf("%s: give exactly one of ratio (0..1] and mib", what)
	case size.MiB > dev.TotalMiB:
		return 0, invalidf("%s: %d MiB is more than GPU %d's %d MiB", what, size.MiB, dev.Index, dev.TotalMiB)
	case size.MiB != 0:
		return size.MiB, nil
	case math.IsNaN(ratio) || ratio <= 0 || ratio > 1:
		return 0, invalidf("%s: ratio %v must be more than 0 and at most 1", what, ratio)
	}
	target := uint64(ratio * float64(dev.TotalMiB))
	if target == 0 { // it would hold nothing, and take the GPU's one filler
		return 0, invalidf("%s: ratio %v of GPU %d's %d MiB is less than 1 MiB", what, ratio, dev.Index, dev.TotalMiB)
	}
	return target, nil
}

// unfill releases a GPU's filler.
func (d *Daemon) unfill(c *call) (any, error) {
	var p api.UnfillParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if p.GPU == nil {
		return nil, invalidf("unfill: gpu is required (an index or a UUID)")
	}
	uuids, err := d.resolveGPUs("unfill", p.GPU, nil)
	if err != nil {
		return nil, err
	}
	f := d.fillers.get(uuids[0])
	if f == nil {
		return nil, api.Errorf(api.CodeNotFound, "unfill: GPU %s has no filler", p.GPU)
	}
	if !c.actor.owns(f.rec.Owner.UID) {
		return nil, deniedf("unfill: GPU %s's filler belongs to %s", p.GPU, f.rec.Owner.User)
	}
	out := d.fillerToAPI(f, d.gpuView())
	if err := d.releaseFiller(context.WithoutCancel(c.ctx), f, "unfill"); err != nil {
		return nil, fmt.Errorf("unfill GPU %s: %w", p.GPU, err)
	}
	out.HeldMiB = 0
	return out, nil
}

// listFillers lists every filler by GPU index: what is held on a GPU is no
// secret, like the GPU's memory itself.
func (d *Daemon) listFillers(c *call) (any, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return nil, err
	}
	return api.FillersResult{Fillers: d.fillersAPI()}, nil
}

// fillersAPI renders every filler, by GPU index.
func (d *Daemon) fillersAPI() []api.Filler {
	gv := d.gpuView()
	out := []api.Filler{}
	for _, f := range d.fillers.all() {
		out = append(out, d.fillerToAPI(f, gv))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// publishFiller announces f's state and returns it.
func (d *Daemon) publishFiller(f *filler) api.Filler {
	out := d.fillerToAPI(f, d.gpuView())
	d.events.publish(api.Event{Type: api.EventFiller, Time: time.Now(), Name: f.rec.UUID, Filler: &out})
	d.sched.kick()
	return out
}

// fillerToAPI renders f.
func (d *Daemon) fillerToAPI(f *filler, gv *gpuView) api.Filler {
	s := f.look()
	out := api.Filler{Index: gv.index[s.rec.UUID], UUID: s.rec.UUID, User: s.rec.Owner.User, UID: s.rec.Owner.UID,
		Ratio: s.rec.Ratio, TargetMiB: s.rec.TargetMiB, HeldMiB: d.fillerHeld(f, gv), ReservedMiB: s.sent[1],
		ChunkMiB: d.cfg.FillerChunkMiB, PID: s.rec.PID, Session: s.rec.Session, CreatedAt: s.rec.CreatedAt, Error: s.err}
	if s.helper != nil {
		out.PID, out.ChunkMiB = s.helper.PID(), s.helper.ChunkMiB() // an adopted helper keeps its own chunk
		if e := s.helper.State().Error; e != "" && out.Error == "" {
			out.Error = e
		}
	}
	if s.rec.Process != "" {
		for _, r := range d.table.View().Records {
			if r.ID == s.rec.Process {
				out.Process = r.Name
			}
		}
	}
	return out
}

// chargeHelperStart charges uid what the helper their fill started has
// spent so far (its start and first allocation), as a process start is
// charged: the call's own thread (metered) does not see it, and a loop of
// fill and unfill cost the daemon's cgroup 0.64 of a CPU in helper starts.
// Later, a helper's ticks are the daemon's.
func (d *Daemon) chargeHelperStart(uid uint32, pid int) {
	if cpu, err := procfs.CPUTime(pid); err == nil {
		d.bulk.ChargeCPU(uid, cpu)
	}
}
