package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/ramtier"
	"github.com/gpusched/gpusched/pkg/api"
)

// hostMiB is the GPU memory parked in host RAM by every live process but
// skip (nil: none): what the host RAM tier holds.
func (d *Daemon) hostMiB(skip *proctable.Key) uint64 {
	v := d.table.View()
	sum := v.HostMiB() // kept with the snapshot: every status call asks
	if skip == nil {
		return sum
	}
	if r, ok := v.Get(*skip); ok && r.InHostRAM() {
		sum -= r.Checkpoint.MiB()
	}
	return sum
}

// beginFreeze records that rec is freezing procs, after checking that the
// host RAM budget, and its owner's share of it, have room for them. The
// check and the record happen under one lock, so concurrent freezes cannot
// overrun either together.
func (d *Daemon) beginFreeze(rec proctable.Record, procs []proctable.CheckpointProc, opts freezeOpts) (proctable.Record, error) {
	budgeted := !opts.toDisk
	d.ramMu.Lock()
	defer d.ramMu.Unlock()
	cp := &proctable.Checkpoint{Procs: procs}
	if budget := d.cfg.RAMBudgetMiB; budget > 0 && budgeted {
		key := rec.Key()
		held, need := d.hostMiB(&key), cp.MiB()
		if held+need > budget {
			return rec, api.Errorf(api.CodeResourceExhausted,
				"freeze %q needs %d MiB of host RAM; frozen processes hold %d MiB of the %d MiB --ram-budget: thaw, hibernate or kill one first",
				rec.Name, need, held, budget)
		}
		if share := ramtier.Share(key.UID, budget, d.cfg.Limits.RAMFraction); share > 0 {
			_, parked, _ := d.parked(key, nil)
			if mine := ramtier.Held(parked, key.UID); mine+need > share {
				return rec, d.overRAMShare(fmt.Sprintf("freeze %q", rec.Name), need, key.UID, mine, share, "thaw, hibernate or kill one first")
			}
		}
	}
	return d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Checkpoint, r.Error = api.StateFreezing, cp, ""
		if opts.preemptedBy != "" {
			r.PreemptedBy, r.Note = opts.preemptedBy, opts.note
		}
		return nil
	})
}
