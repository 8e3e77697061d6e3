package daemon

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
)

// The per-user caps on GPU leases: --max-leases-per-user, the leases one
// non-root user may hold or wait for at once (acquire is refused past it),
// --user-lease-fraction, the share of all GPUs' memory they may hold or
// wait for together, and --user-lease-max-hold, how long such a user's
// granted lease is held before the daemon releases it (its connection
// stays).
const (
	flagLeases        = "max-leases-per-user"
	flagLeaseFraction = "user-lease-fraction"
	flagLeaseHold     = "user-lease-max-hold"
)

// admitLease is the admission a's acquire of l passes when it is queued,
// given the leases a holds or waits for already: nil (none) for root.
func (d *Daemon) admitLease(a actor, l *lease) func(mine []*lease) error {
	if a.root() {
		return nil
	}
	return func(mine []*lease) error {
		if err := limits.Check(a.UID, a.User, len(mine), d.cfg.Limits.LeasesPerUser, flagLeases, "GPU leases held or waited for"); err != nil {
			return err
		}
		return d.checkLeaseShare(a, l, mine)
	}
}

// checkLeaseShare refuses l where, with mine, a's leases would hold more
// than --user-lease-fraction of all GPUs' memory: one user's leases held
// every GPU for --user-lease-max-hold, again at once after it, and every
// other user's jobs waited (a red-team pass, 2026-11-29).
func (d *Daemon) checkLeaseShare(a actor, l *lease, mine []*lease) error {
	frac := d.cfg.Limits.LeaseFraction
	view := d.gpuView()
	if frac <= 0 || frac >= 1 || len(view.devices) == 0 {
		return nil
	}
	var all uint64
	for _, dev := range view.devices {
		all += dev.TotalMiB
	}
	held := leaseMiB(view, l)
	for _, o := range mine {
		held = satAdd(held, leaseMiB(view, o))
	}
	capMiB := uint64(frac * float64(all))
	if held <= capMiB {
		return nil
	}
	return &limits.Exceeded{Flag: flagLeaseFraction, Msg: fmt.Sprintf("acquire: user %s's leases would hold %d MiB of the GPUs' %d MiB (a lease without min_free holds its GPUs whole); --%s %v lets a user's leases hold at most %d MiB",
		a.User, held, all, flagLeaseFraction, frac, capMiB)}
}

// leaseMiB is the GPU memory l holds, or would once granted: min_free on
// each of its GPUs, or, without one, its GPUs whole (the largest it may be
// granted while it waits).
func leaseMiB(view *gpuView, l *lease) uint64 {
	switch {
	case l.mib > 0 && len(l.uuids) > 0: // granted
		return satMul(l.mib, uint64(len(l.uuids)))
	case l.mib > 0:
		return satMul(l.mib, uint64(l.count))
	case len(l.uuids) > 0:
		var n uint64
		for _, u := range l.uuids {
			if dev, ok := view.device(u); ok {
				n += dev.TotalMiB
			}
		}
		return n
	}
	var largest uint64
	for _, dev := range view.devices {
		if len(l.only) == 0 || slices.Contains(l.only, dev.UUID) {
			largest = max(largest, dev.TotalMiB)
		}
	}
	return satMul(largest, uint64(l.count))
}

// satMul and satAdd are a*b and a+b, at most math.MaxUint64: a lease's
// min_free times its gpus wrapped round to a size within the share (a
// red-team pass; placement refused that lease, but the share must not
// count on it).
func satMul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}

func satAdd(a, b uint64) uint64 {
	if s, carry := bits.Add64(a, b, 0); carry == 0 {
		return s
	}
	return math.MaxUint64
}

// limitHold arranges for a's granted lease id to be released once held
// for --user-lease-max-hold; root's are held until released.
func (d *Daemon) limitHold(a actor, id string) {
	hold := d.cfg.Limits.LeaseMaxHold
	if a.root() || hold <= 0 {
		return
	}
	d.leases.expireAfter(id, hold, func() {
		why := fmt.Sprintf("lease %s of %s released: held for %v, the most --%s allows", id, a.User, hold, flagLeaseHold)
		if d.releaseLease(id, why) {
			d.log.Info("lease released", zap.String("lease", id), zap.String("user", a.User),
				zap.String("why", "held for --"+flagLeaseHold), zap.Duration("hold", hold))
		}
	})
}
