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

// beginFreeze records that rec is freezing procs, held to the host RAM
// budget and its owner's share of it (holdInRAM).
func (d *Daemon) beginFreeze(rec proctable.Record, procs []proctable.CheckpointProc, opts freezeOpts) (proctable.Record, error) {
	cp := &proctable.Checkpoint{Procs: procs}
	out, err := d.holdInRAM(fmt.Sprintf("freeze %q", rec.Name), rec.Key(), cp.MiB(), !opts.toDisk, func() (proctable.Record, error) {
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
	})
	if err != nil {
		return rec, err
	}
	return out, nil
}

// holdInRAM runs record, which marks key's process as holding need MiB of
// GPU memory in host RAM, once the RAM budget and its owner's share of it
// have room for them (where budgeted). The check and the record happen
// under one lock, so that concurrent freezes and restores into RAM cannot
// overrun either together.
func (d *Daemon) holdInRAM(what string, key proctable.Key, need uint64, budgeted bool, record func() (proctable.Record, error)) (proctable.Record, error) {
	d.ramMu.Lock()
	defer d.ramMu.Unlock()
	if budgeted {
		if err := d.ramRoom(what, key, need, "thaw, hibernate or kill one first"); err != nil {
			return proctable.Record{}, err
		}
	}
	return record()
}

// ramRoom refuses need more MiB in host RAM for key's process (what) where
// the RAM budget, or its owner's share of it, has no room for them besides
// what the others hold; advice ends the refusal.
func (d *Daemon) ramRoom(what string, key proctable.Key, need uint64, advice string) error {
	budget := d.cfg.RAMBudgetMiB
	if budget == 0 {
		return nil
	}
	held := d.hostMiB(&key)
	if held+need > budget {
		return api.Errorf(api.CodeResourceExhausted, "%s needs %d MiB of host RAM; frozen processes hold %d MiB of the %d MiB --ram-budget: %s",
			what, need, held, budget, advice)
	}
	share := ramtier.Share(key.UID, budget, d.cfg.Limits.RAMFraction)
	if mine := d.ownHostMiB(key); ramtier.OverShare(share, held, mine, need) {
		return d.overRAMShare(what, need, key.UID, mine, share, advice)
	}
	return nil
}

// undoPastRAM settles key's process, which an operation left frozen in
// host RAM where nothing held it to the budget: it stays only where the RAM
// budget and its owner's share have room for it, as a freeze is held to;
// otherwise undo takes it out. past is the refusal a freeze would have met
// there, ending in advice (nil: it stays, or it is not frozen); uerr is
// undo's failure.
func (d *Daemon) undoPastRAM(key proctable.Key, advice string, undo func(proctable.Record) error) (past, uerr error) {
	rec, ok := d.table.Get(key)
	if !ok || rec.State != api.StateFrozen {
		return nil, nil
	}
	if past = d.ramRoom(fmt.Sprintf("%q, frozen,", rec.Name), key, rec.Checkpoint.MiB(), advice); past == nil {
		return nil, nil
	}
	return past, undo(rec)
}

// ownHostMiB is the GPU memory that key's owner's processes but key's park
// in host RAM.
func (d *Daemon) ownHostMiB(key proctable.Key) uint64 {
	v := d.table.View()
	mine := v.HostMiBOf(key.UID)
	if r, ok := v.Get(key); ok && r.InHostRAM() {
		mine -= r.Checkpoint.MiB()
	}
	return mine
}
