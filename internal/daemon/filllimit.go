package daemon

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
)

// --user-fill-fraction: the share of each GPU's memory a non-root user's
// filler may hold, whoever asked for it. A filler's target is the GPU's
// total usage it keeps, its own memory included, so what it holds never
// exceeds its target: the cap bounds the target. fill and run --filled
// asking for more are refused; a persisted filler above it (kept from
// before the cap, or under a larger one) is brought down to it when the
// daemon next drives its helper.
const flagFillFraction = "user-fill-fraction"

// fillCap is the largest target uid's filler may have on uuid, and whether
// there is a cap at all.
func (d *Daemon) fillCap(uid uint32, uuid string) (uint64, bool) {
	frac := d.cfg.Limits.FillFraction
	dev, ok := d.gpuView().device(uuid)
	if uid == limits.Root || frac <= 0 || frac >= 1 || !ok {
		return 0, false
	}
	return uint64(frac * float64(dev.TotalMiB)), true
}

// checkFillShare refuses a target (MiB) on uuid above the cap of the
// filler's owner.
func (d *Daemon) checkFillShare(owner proctable.Owner, what, uuid string, target uint64) error {
	capMiB, ok := d.fillCap(owner.UID, uuid)
	if !ok || target <= capMiB {
		return nil
	}
	dev, _ := d.gpuView().device(uuid)
	return &limits.Exceeded{Flag: flagFillFraction, Msg: fmt.Sprintf("%s: user %s asks its filler to hold GPU %d at %d MiB of its %d MiB; --%s %v lets a user's filler hold at most %d MiB there",
		what, owner.User, dev.Index, target, dev.TotalMiB, flagFillFraction, d.cfg.Limits.FillFraction, capMiB)}
}

// capFiller brings a user's filler whose target is above the cap down to
// it, and keeps the record so. The caller holds f.mu.
func (d *Daemon) capFiller(f *filler) {
	capMiB, ok := d.fillCap(f.rec.Owner.UID, f.rec.UUID)
	if !ok || f.rec.TargetMiB <= capMiB {
		return
	}
	d.log.Warn("filler target lowered to the user's cap", zap.String("gpu", f.rec.UUID), zap.String("user", f.rec.Owner.User),
		zap.Uint64("target_mib", f.rec.TargetMiB), zap.Uint64("cap_mib", capMiB), zap.Float64(flagFillFraction, d.cfg.Limits.FillFraction))
	f.rec.TargetMiB = capMiB
	if f.rec.Ratio > 0 {
		f.rec.Ratio = d.cfg.Limits.FillFraction
	}
	if err := d.fillers.store.Put(f.rec.UUID, f.rec); err != nil {
		d.log.Warn("save filler", zap.String("gpu", f.rec.UUID), zap.Error(err))
	}
}
