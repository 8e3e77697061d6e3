package daemon

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// checkFilled validates run --filled before anything starts: a ratio of a
// single GPU that has no filler yet, within owner's share of it.
func (d *Daemon) checkFilled(owner proctable.Owner, name string, ratio float64, gpus []string) error {
	what := fmt.Sprintf("run %q", name)
	switch {
	case math.IsNaN(ratio) || ratio <= 0 || ratio > 1:
		return invalidf("%s: filled %v must be more than 0 and at most 1", what, ratio)
	case len(gpus) != 1:
		return invalidf("%s: filled needs exactly one GPU, not %d", what, len(gpus))
	}
	if dev, ok := d.gpuView().device(gpus[0]); ok {
		if err := d.checkFillShare(owner, what, gpus[0], uint64(ratio*float64(dev.TotalMiB))); err != nil {
			return err
		}
	}
	if f := d.fillers.get(gpus[0]); f != nil {
		return conflictf("%s: GPU %d already has a filler (of %s)", what, d.gpuView().index[gpus[0]], f.rec.Owner.User)
	}
	return nil
}

// attachFiller starts a filler that holds rec's GPU at ratio for as long
// as rec lives. If it cannot start, the process is ended, so that a failed
// run leaves nothing behind.
func (d *Daemon) attachFiller(ctx context.Context, rec proctable.Record, ratio float64) (proctable.Record, error) {
	uuid := rec.GPUs[0]
	fail := func(err error) (proctable.Record, error) {
		if _, kerr := d.endTree(rec, d.cfg.KillGrace); kerr != nil {
			d.log.Warn("end a process whose filler failed", zap.String("name", rec.Name), zap.Error(kerr))
		}
		return rec, fmt.Errorf("run %q: its filler: %w", rec.Name, err)
	}
	target, err := d.fillTarget(fmt.Sprintf("run %q", rec.Name), uuid, ratio, api.VRAM{})
	if err != nil {
		return fail(err)
	}
	f := newFiller(fillerRecord{UUID: uuid, Owner: rec.Owner, Ratio: ratio, TargetMiB: target, Process: rec.ID,
		CreatedAt: time.Now()})
	if old, added := d.fillers.add(f); !added {
		return fail(conflictf("GPU %s got a filler of %s meanwhile", uuid, old.rec.Owner.User))
	}
	f.mu.Lock()
	err = d.spawnFiller(ctx, f)
	if err == nil {
		err = d.fillers.store.Put(uuid, f.rec)
	}
	f.unlock()
	if err != nil {
		_ = d.releaseFiller(ctx, f, "it failed to start")
		return fail(err)
	}
	d.publishFiller(f)
	return d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.Filled = ratio
		return nil
	})
}
