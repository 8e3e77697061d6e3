package daemon

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// maxRmNames bounds the names one rm may list.
const maxRmNames = 10000

// rm forgets exited processes: one by name (answered with its Process),
// several by names, or every exited process the caller may remove (both
// answered with what was removed and what was not, and why). It is bulk
// work, in one of the caller's turns: one call may remove thousands of
// records with their logs, so it waits for the caller's share of the
// daemon's CPU and is charged to it.
func (d *Daemon) rm(c *call) (any, error) {
	var p api.RmParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	switch {
	case p.Exited && (p.Name != "" || p.Names != nil):
		return nil, invalidf("rm: give names or exited, not both")
	case p.Exited:
		return d.rmExited(c, p.User)
	case p.User != "":
		return nil, invalidf("rm: user goes only with exited")
	case p.Name != "" && p.Names != nil:
		return nil, invalidf("rm: give name or names, not both")
	case p.Names != nil:
		return d.rmNames(c, p.Names)
	}
	rec, err := d.rmCheck(c, p.Name)
	if err != nil {
		return nil, err
	}
	removed, failed := d.forget(c.ctx, []proctable.Key{rec.Key()}, "", sameRecord(c.actor, map[proctable.Key]string{rec.Key(): rec.ID}))
	if err := failed[rec.Key()]; err != nil {
		return nil, err
	}
	return toAPI(removed[0], d.gpuView()), nil
}

// rmNames forgets each of names that the caller may remove; each name is
// removed entirely or not at all. A bad name refuses the whole call.
func (d *Daemon) rmNames(c *call, names []string) (any, error) {
	switch {
	case len(names) == 0:
		return nil, invalidf("rm: names is empty")
	case len(names) > maxRmNames:
		return nil, invalidf("rm: %d names; at most %d at once", len(names), maxRmNames)
	}
	seen := make(map[string]bool, len(names))
	uniq := make([]string, 0, len(names))
	for _, n := range names {
		if _, _, _, err := splitRef(n); err != nil {
			return nil, invalidf("rm: %v", err)
		}
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	want := map[proctable.Key]string{}
	refOf := map[proctable.Key]string{}
	failed := map[string]error{}
	var ok []proctable.Key
	for _, n := range uniq {
		rec, err := d.rmCheck(c, n)
		if err != nil {
			failed[n] = err
			continue
		}
		if _, dup := want[rec.Key()]; dup {
			continue // named twice, as NAME and USER/NAME
		}
		want[rec.Key()], refOf[rec.Key()] = rec.ID, n
		ok = append(ok, rec.Key())
	}
	removed, byKey := d.forget(c.ctx, ok, "", sameRecord(c.actor, want))
	for k, err := range byKey {
		failed[refOf[k]] = err
	}
	return d.rmResult(c, uniq, removed, failed), nil
}

// rmExited forgets every exited process of the caller (root: of every
// user, or of user).
func (d *Daemon) rmExited(c *call, user string) (any, error) {
	if err := checkUserFilter(c, user, "processes"); err != nil {
		return nil, err
	}
	want := map[proctable.Key]string{}
	var keys []proctable.Key
	var refs []string
	for _, r := range d.finishedProcs() {
		if c.actor.owns(r.Owner.UID) && (user == "" || r.Owner.User == user) {
			want[r.Key()] = r.ID
			keys, refs = append(keys, r.Key()), append(refs, refTo(c.actor, r))
		}
	}
	removed, byKey := d.forget(c.ctx, keys, "", sameRecord(c.actor, want))
	failed := make(map[string]error, len(byKey))
	for i, k := range keys {
		if err, ok := byKey[k]; ok {
			failed[refs[i]] = err
		}
	}
	return d.rmResult(c, refs, removed, failed), nil
}

// checkUserFilter refuses a non-root caller's user filter naming someone
// else: only root acts on other users' what.
func checkUserFilter(c *call, user, what string) error {
	if user != "" && !c.actor.root() && user != c.actor.User {
		return deniedf("%s: only root may act on another user's %s; you are %s", c.method, what, c.actor.User)
	}
	return nil
}

// rmCheck finds name and checks that the caller may rm it now.
func (d *Daemon) rmCheck(c *call, name string) (proctable.Record, error) {
	r, err := d.lookup(c, name)
	if err != nil {
		return proctable.Record{}, err
	}
	if r.Live() {
		return proctable.Record{}, conflictf("process %q is %s; kill it before rm", name, r.State)
	}
	return r, nil
}

// sameRecord accepts, at removal, only the record of each key that was
// looked at (want: key -> record id), still exited and the caller's.
func sameRecord(a actor, want map[proctable.Key]string) func(proctable.Record) error {
	return func(r proctable.Record) error {
		switch {
		case !a.owns(r.Owner.UID):
			return deniedf("process %q belongs to %s", r.Name, r.Owner.User)
		case r.Live():
			return conflictf("process %q is %s; kill it before rm", r.Name, r.State)
		case r.ID != want[r.Key()]:
			return conflictf("process %q was replaced meanwhile; nothing removed", r.Name)
		}
		return nil
	}
}

// rmResult lists, in the order of names, what was removed (each command
// cut: listReply) and what failed: an api.RmResult.
func (d *Daemon) rmResult(c *call, names []string, removed []proctable.Record, failed map[string]error) *listReply {
	gv := d.gpuView()
	return d.listing(c, listField{"removed", func(yield func(any) bool) {
		for _, r := range removed {
			if !yield(listedProcess(toAPI(r, gv))) {
				return
			}
		}
	}}, listField{"failed", func(yield func(any) bool) {
		for _, n := range names {
			if err, ok := failed[n]; ok {
				code, msg := toWire(err)
				if !yield(api.RmFailure{Name: n, Error: msg, Code: code}) {
					return
				}
			}
		}
	}})
}

// forget removes the records of keys that check accepts, as rm does: the
// record, its status file, its logs and its supervisor directory, all gone
// before the removal's event (which carries why) is published, under the
// key's op lock, so that what goes is never a newer process's. It returns
// the records removed, in the order of keys, and why each other key was
// not.
func (d *Daemon) forget(ctx context.Context, keys []proctable.Key, why string, check func(proctable.Record) error) ([]proctable.Record, map[proctable.Key]error) {
	got := map[proctable.Key]proctable.Record{}
	failed := map[proctable.Key]error{}
	// Keys whose op lock is free go in one batch, with one sync; the
	// others are waited for one at a time, holding no other lock.
	var batch, busy []proctable.Key
	var unlocks []func()
	for _, n := range keys {
		if unlock, ok := d.ops.tryLock(n); ok {
			batch = append(batch, n)
			unlocks = append(unlocks, unlock)
		} else {
			busy = append(busy, n)
		}
	}
	d.forgetLocked(batch, why, check, got, failed)
	for _, unlock := range unlocks {
		unlock()
	}
	for _, n := range busy {
		unlock, err := d.ops.lock(ctx, n)
		if err != nil {
			failed[n] = err
			continue
		}
		d.forgetLocked([]proctable.Key{n}, why, check, got, failed)
		unlock()
	}
	removed := make([]proctable.Record, 0, len(got))
	for _, n := range keys {
		if r, ok := got[n]; ok {
			removed = append(removed, r)
		}
	}
	return removed, failed
}

// forgetLocked is forget's removal of keys, whose op locks the caller
// holds; it adds to got and failed.
func (d *Daemon) forgetLocked(keys []proctable.Key, why string, check func(proctable.Record) error, got map[proctable.Key]proctable.Record, failed map[proctable.Key]error) {
	if len(keys) == 0 {
		return
	}
	recs, f, err := d.table.RemoveAll(keys, proctable.Removal{Why: why, Check: check, Clean: func(rec proctable.Record) {
		os.Remove(rec.StatusPath)
		d.removeLogs(rec.LogPath)
		d.removeSandboxHome(rec.ID)
	}})
	if err != nil {
		d.log.Error("forget processes", zap.Error(err))
	}
	for n, e := range f {
		failed[n] = e
	}
	for _, rec := range recs {
		got[rec.Key()] = rec
	}
}
