package router

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/gpusched/gpusched/internal/limits"
)

// Users are the local users a config key lets do something everyone's
// requests depend on (unload_users, upstream_users), besides root and the
// router's own user, who always may.
type Users struct {
	UIDs   []uint32
	Anyone bool // the list holds "*": any client, one on another host included
}

// allows says whether the client whose socket uid owns is one of u.
func (u Users) allows(uid uint32) bool {
	switch {
	case u.Anyone:
		return true
	case uid == limits.AnyPeer:
		return false
	case uid == 0 || uid == uint32(os.Getuid()):
		return true
	}
	return slices.Contains(u.UIDs, uid)
}

// forbidden is the 403's message for uid: what it asked for, why that is
// not everyone's, and the key that would allow it.
func forbidden(what, key string, uid uint32) string {
	who := fmt.Sprintf("your user (uid %d) is not", uid)
	if uid == limits.AnyPeer {
		who = fmt.Sprintf("the router cannot tell which local user you are (a client on another host, or no sock_diag), and %s does not hold \"*\"", key)
	}
	return fmt.Sprintf("%s: it is for root, the router's own user (uid %d) and %s; %s", what, os.Getuid(), key, who)
}

// parseUsers reads a list of local user names or uids, or "*" for any
// client.
func parseUsers(x any) (Users, error) {
	names, err := stringList(x)
	if err != nil {
		return Users{}, err
	}
	var u Users
	for i, n := range names {
		if n == "*" {
			u.Anyone = true
			continue
		}
		id := n
		if _, err := strconv.ParseUint(n, 10, 32); err != nil {
			pw, err := user.Lookup(n)
			if err != nil {
				return Users{}, fmt.Errorf("item %d: no local user %q (want a user name, a uid or \"*\")", i+1, n)
			}
			id = pw.Uid
		}
		uid, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return Users{}, fmt.Errorf("item %d: user %q has uid %q", i+1, n, id)
		}
		u.UIDs = append(u.UIDs, uint32(uid))
	}
	return u, nil
}
