package daemon

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/ramtier"
	"github.com/gpusched/gpusched/pkg/api"
)

// makeRoom hibernates frozen processes until need MiB, all that skip's
// freeze (or a fork copy's restore) parks, fit its owner's share of the
// host RAM budget (--user-ram-fraction) where any other user's frozen
// processes are there too, taking the owner's own first, and then the
// budget itself, taking first from the users who hold more than
// their level (ramtier.Order). Nothing is ever killed, and nothing is evicted where
// eviction could not make the room: the freeze then fails, saying why.
func (d *Daemon) makeRoom(ctx context.Context, what string, need uint64, skip proctable.Key) error {
	budget := d.cfg.RAMBudgetMiB
	if budget == 0 {
		return nil
	}
	owner := skip.UID
	share := ramtier.Share(owner, budget, d.cfg.Limits.RAMFraction)
	tried := map[proctable.Key]bool{}
	for first := true; ; first = false {
		recs, parked, pinned := d.parked(skip, tried)
		held, mine := ramtier.Total(parked), ramtier.Held(parked, owner)
		overShare := ramtier.OverShare(share, held, mine, need)
		if !overShare && held+need <= budget {
			return nil
		}
		refuse := func(overShare bool, why string) error {
			if overShare {
				return d.overRAMShare(what, need, owner, mine, share, why)
			}
			return api.Errorf(api.CodeResourceExhausted, "%s needs %d MiB of host RAM; frozen processes hold %d MiB of the %d MiB --ram-budget: %s",
				what, need, held, budget, why)
		}
		couldNot := func(overShare bool) error {
			whose := uint32(limits.Root)
			if overShare {
				whose = owner
			}
			return refuse(overShare, "hibernating them could not make that room"+pinnedOf(pinned, whose))
		}
		// Nothing is evicted where evicting all that may be would not make room.
		own, all := ramtier.Room(parked, owner)
		switch {
		case overShare && need > share:
			return refuse(true, "this freeze alone needs more than that")
		case d.criu == nil:
			return refuse(overShare, fmt.Sprintf("the disk tier that could take them is off (%v)", d.criuErr))
		case first && overShare && mine-own+need > share:
			return couldNot(true)
		case first && held-all+need > budget:
			return couldNot(false)
		}
		order := ramtier.Order(parked, budget, owner, need)
		if overShare {
			order = ramtier.Own(parked, owner)
		}
		if len(order) == 0 {
			return couldNot(overShare)
		}
		v := recs[order[0]]
		tried[v.Key()] = true
		why := fmt.Sprintf("hibernated to make room in host RAM for %s", what)
		if _, err := d.evict(ctx, v, hibernateOpts{why: why, freed: true}); err != nil {
			d.log.Warn("eviction failed", zap.String("name", v.Name), zap.String("why", why), zap.Error(err))
		}
	}
}

// flagRAMFraction is the share of --ram-budget one non-root user's frozen
// processes may hold.
const flagRAMFraction = "user-ram-fraction"

// overRAMShare is the refusal of what, which would take owner's frozen
// processes past their share of the host RAM budget; why says what
// eviction could not do.
func (d *Daemon) overRAMShare(what string, need uint64, owner uint32, mine, share uint64, why string) error {
	return &limits.Exceeded{Flag: flagRAMFraction, Msg: fmt.Sprintf("%s needs %d MiB of host RAM; user %s's frozen processes hold %d MiB of the %d MiB they may (--%s %g of the %d MiB --ram-budget): %s",
		what, need, d.names.name(owner), mine, share, flagRAMFraction, d.cfg.Limits.RAMFraction, d.cfg.RAMBudgetMiB, why)}
}

// pinnedOf names the pinned processes of uid (of everyone's where uid is
// root) as the end of a refusal, or nothing where there are none.
func pinnedOf(pinned []proctable.Record, uid uint32) string {
	var names []string
	for _, r := range pinned {
		if uid == limits.Root || r.Owner.UID == uid {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (pinned: " + strings.Join(names, ", ") + ")"
}

// parked lists every process but skip whose GPU memory is in host RAM,
// with its ramtier view: evictable where frozen, not pinned and not tried.
// pinned are the frozen ones eviction may not take.
func (d *Daemon) parked(skip proctable.Key, tried map[proctable.Key]bool) (recs []proctable.Record, parked []ramtier.Parked, pinned []proctable.Record) {
	for _, r := range d.table.View().Records {
		if !r.InHostRAM() || r.Key() == skip {
			continue
		}
		frozen := r.State == api.StateFrozen
		if frozen && r.Policy.Pin {
			pinned = append(pinned, *r)
		}
		recs = append(recs, *r)
		parked = append(parked, ramtier.Parked{Owner: r.Owner.UID, MiB: r.Checkpoint.MiB(), Priority: r.Policy.Priority,
			FrozenAt: r.Checkpoint.FrozenAt, Evictable: frozen && !r.Policy.Pin && !tried[r.Key()]})
	}
	return recs, parked, pinned
}

// evict hibernates v with o if its lifecycle lock is free and it is still
// frozen; o.why is recorded on the process. It reports whether it tried.
func (d *Daemon) evict(ctx context.Context, v proctable.Record, o hibernateOpts) (bool, error) {
	unlock, ok := d.ops.tryLock(v.Key())
	if !ok {
		return false, nil
	}
	defer unlock()
	cur, ok := d.table.Get(v.Key())
	if !ok || cur.ID != v.ID || cur.State != api.StateFrozen {
		return false, nil
	}
	if _, err := d.hibernateLocked(ctx, cur, o); err != nil {
		return true, err
	}
	d.log.Info("evicted to disk", zap.String("name", v.Name), zap.String("why", o.why))
	return true, nil
}
