package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// processKey is the key of the process a caller names. A name is the
// caller's own process: names are per user, so no user can take one from
// another. Root may also name another user's process as USER/NAME (USER a
// user name or uid), or by its name alone where root has no process of
// that name and exactly one user has.
func (d *Daemon) processKey(c *call, ref string) (proctable.Key, error) {
	user, name, qualified, err := splitRef(ref)
	if err != nil {
		return proctable.Key{}, invalidf("%s: %v", c.method, err)
	}
	own := proctable.Key{UID: c.actor.UID, Name: name}
	switch {
	case qualified:
		f := nameFilter{user: user, name: name, qualified: true}
		for _, r := range d.table.View().Named(name) {
			if f.match(r.Name, r.Owner.UID, r.Owner.User) {
				return r.Key(), nil
			}
		}
		return proctable.Key{}, api.Errorf(api.CodeNotFound, "process %q not found", ref)
	case !c.actor.root():
		return own, nil
	}
	if _, ok := d.table.Get(own); ok {
		return own, nil
	}
	switch named := d.table.View().Named(name); len(named) {
	case 0:
		return own, nil
	case 1:
		return named[0].Key(), nil
	default:
		users := make([]string, len(named))
		for i, r := range named {
			users[i] = r.Owner.User
		}
		return proctable.Key{}, ambiguous(c, "process", name, users)
	}
}

// refTo is how the caller a names r: its name where r is a's, USER/NAME where not.
func refTo(a actor, r proctable.Record) string {
	if r.Owner.UID == a.UID {
		return r.Name
	}
	return r.Owner.User + "/" + r.Name
}

// splitRef reads a caller's name of a process: NAME, or USER/NAME.
func splitRef(ref string) (user, name string, qualified bool, err error) {
	user, name, qualified = strings.Cut(ref, "/")
	if !qualified {
		user, name = "", ref
	}
	if qualified && !userRef(user) {
		return "", "", false, fmt.Errorf("name %q: %q before the '/' is not a user name or uid", ref, user)
	}
	if err := api.ValidateName(name); err != nil {
		return "", "", false, err
	}
	return user, name, qualified, nil
}

// userRef reports whether s may be a user's name or uid in USER/NAME: it
// is only compared with owners, never used as a path, so directory
// services' names (alice@corp, DOMAIN\alice) are welcome; not ".", "..",
// control characters or more than 256 bytes.
func userRef(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// nameFilter is a listing's filter by process name: NAME matches that
// name whoever owns it (the caller sees only what they may), USER/NAME
// only that user's; "" matches everything.
type nameFilter struct {
	user, name string
	qualified  bool
}

// parseNameFilter reads a listing's filter ("": none).
func parseNameFilter(ref string) (nameFilter, error) {
	if ref == "" {
		return nameFilter{}, nil
	}
	user, name, qualified, err := splitRef(ref)
	return nameFilter{user: user, name: name, qualified: qualified}, err
}

// match reports whether the filter takes name, owned by uid (user).
func (f nameFilter) match(name string, uid uint32, user string) bool {
	switch {
	case f.name == "":
		return true
	case name != f.name:
		return false
	}
	return !f.qualified || f.user == user || f.user == strconv.FormatUint(uint64(uid), 10)
}

// jobKey is the job a caller names: by id (j<digits>), or by name as
// processKey reads one (job names are per user too), the owner's newest
// job of that name.
func (d *Daemon) jobKey(c *call, ref string) (*jobqueue.Job, error) {
	if jobqueue.IsID(ref) {
		if j, ok := d.jobs.Get(ref); ok {
			return j, nil
		}
		return nil, api.Errorf(api.CodeNotFound, "job %q not found", ref)
	}
	user, name, qualified, err := splitRef(ref)
	if err != nil {
		return nil, invalidf("%s: %v", c.method, err)
	}
	if !qualified {
		j, ok := d.jobs.Owned(c.actor.UID, name)
		switch {
		case ok:
			return j, nil
		case !c.actor.root():
			return nil, api.Errorf(api.CodeNotFound, "job %q not found", ref)
		}
	}
	// USER/NAME, or root's NAME of another user's job: the newest of each
	// owner's of that name, read from the newest job back.
	f := nameFilter{user: user, name: name, qualified: qualified}
	owners := map[uint32]*jobqueue.Job{}
	var users []string
	v := d.jobs.View()
	for i := len(v) - 1; i >= 0; i-- {
		j := v[i]
		if owners[j.Owner.UID] == nil && f.match(j.Name, j.Owner.UID, j.Owner.User) {
			owners[j.Owner.UID] = j
			users = append(users, j.Owner.User)
		}
	}
	switch len(owners) {
	case 0:
		return nil, api.Errorf(api.CodeNotFound, "job %q not found", ref)
	case 1:
		for _, j := range owners {
			return j, nil
		}
	}
	return nil, ambiguous(c, "job", name, users)
}

// ambiguous refuses root's name alone of what several users have one of.
func ambiguous(c *call, what, name string, users []string) error {
	slices.Sort(users)
	return invalidf("%s: %d users have a %s %q (%s): name one as USER/%s", c.method, len(users), what, name, strings.Join(users, ", "), name)
}
