package daemon

import (
	"context"
	"slices"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/pkg/api"
)

// A filler hands memory over to its owner's processes before they need it:
// it keeps free, beyond what its target leaves free, its reserve:
//   - the part of each starting or running job's declaration the job has
//     not allocated yet (the whole GPU for an undeclared job), so a job
//     launched onto a filled GPU, or growing toward its declaration, never
//     meets the filler's memory;
//   - the memory of each thaw in progress onto the GPU (a pending
//     hand-over, from admission until the thaw ends);
//   - what each of the owner's leases holds there and has not used yet.
// Processes without a declaration (run, including the process a filler is
// attached to) are followed through free memory alone: the helper gives
// back what they take within one tick.

// fillerReserve is the reserve of f now; the caller holds f.mu.
func (d *Daemon) fillerReserve(f *filler) uint64 {
	uuid, uid := f.rec.UUID, f.rec.Owner.UID
	gv := d.gpuView()
	dev, _ := gv.device(uuid)
	reserve := f.reservePending()
	for _, j := range d.jobs.Active() {
		if j.Owner.UID != uid || j.State != api.JobStarting && j.State != api.JobRunning {
			continue
		}
		a := j.Current()
		if a == nil || !slices.Contains(a.GPUs, uuid) {
			continue
		}
		decl := j.VRAMMiB
		if decl == 0 {
			decl = dev.TotalMiB
		}
		reserve += free(decl, gv.usage[j.Proc][uuid])
	}
	for _, l := range d.leases.granted() {
		if l.uid != uid || !slices.Contains(l.uuids, uuid) {
			continue
		}
		decl := l.mib
		if decl == 0 {
			decl = dev.TotalMiB
		}
		reserve += free(decl, l.used[uuid])
	}
	return reserve
}

// fillerYield is what the filler on uuid would hand over to uid's
// processes now: what it holds, if it is uid's.
func (d *Daemon) fillerYield(uuid string, uid uint32) uint64 {
	f := d.fillers.get(uuid)
	if f == nil || f.rec.Owner.UID != uid {
		return 0
	}
	return d.fillerHeld(f, d.gpuView())
}

// fillerHeld is what f holds on its GPU: as the last sample saw its helper
// (driver overhead included), else as the helper last reported.
func (d *Daemon) fillerHeld(f *filler, gv *gpuView) uint64 {
	s := f.look()
	h, pid := s.helper, s.rec.PID
	for _, pu := range gv.procs {
		if pu.PID == pid && pu.UUID == f.rec.UUID {
			return pu.UsedMiB
		}
	}
	if h == nil {
		return 0
	}
	return h.State().HeldMiB
}

// handOver makes uid's fillers on need's GPUs free need (MiB per GPU UUID)
// now, for a thaw about to restore that much, and returns once they have.
// done drops the pending hand-over once the memory is in place (or the
// thaw failed). Fillers of other owners are left alone: admission charged
// them as used.
func (d *Daemon) handOver(ctx context.Context, uid uint32, need map[string]uint64) (done func()) {
	type given struct {
		f     *filler
		token uint64
	}
	var gave []given
	for _, uuid := range sortedKeys(need) {
		f := d.fillers.get(uuid)
		if f == nil || f.rec.Owner.UID != uid || need[uuid] == 0 {
			continue
		}
		token := d.fillers.nextToken()
		f.mu.Lock()
		f.pending[token] = need[uuid]
		if err := d.applyFiller(ctx, f); err != nil {
			d.log.Warn("filler hand-over", zap.String("gpu", uuid), zap.Error(err))
		}
		f.unlock()
		gave = append(gave, given{f, token})
	}
	return func() {
		for _, g := range gave {
			g.f.mu.Lock()
			delete(g.f.pending, g.token)
			g.f.unlock()
		}
		if len(gave) > 0 {
			d.fillers.kick()
		}
	}
}

// syncFillers brings the fillers on uuids up to date now, waiting until
// their helpers have applied their reserves: a job's launch calls it once
// the job is recorded as starting, so its declaration is handed over
// before its process runs.
func (d *Daemon) syncFillers(ctx context.Context, uuids []string) {
	for _, uuid := range uuids {
		f := d.fillers.get(uuid)
		if f == nil {
			continue
		}
		f.mu.Lock()
		if err := d.applyFiller(ctx, f); err != nil {
			d.log.Warn("filler hand-over", zap.String("gpu", uuid), zap.Error(err))
		}
		f.unlock()
	}
}
