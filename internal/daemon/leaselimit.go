package daemon

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
)

// The per-user caps on GPU leases: --max-leases-per-user, the leases one
// non-root user may hold or wait for at once (acquire is refused past it),
// and --user-lease-max-hold, how long such a user's granted lease is held
// before the daemon releases it (its connection stays).
const (
	flagLeases    = "max-leases-per-user"
	flagLeaseHold = "user-lease-max-hold"
)

// admitLease is the admission a's acquire passes when its lease is
// queued: nil (none) for root.
func (d *Daemon) admitLease(a actor) func(leases int) error {
	if a.root() {
		return nil
	}
	return func(leases int) error {
		return limits.Check(a.UID, a.User, leases, d.cfg.Limits.LeasesPerUser, flagLeases, "GPU leases held or waited for")
	}
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
