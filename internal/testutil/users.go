package testutil

import (
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// User is a real unprivileged account a test acts as.
type User struct {
	Name     string
	UID, GID uint32 // GID: the user's own primary group
	Group    string // the shared group the tests put it in (may use the socket)
	GroupGID uint32
}

// Groups are the user's supplementary groups as a process started for it
// should hold them.
func (u User) Groups() []uint32 { return []uint32{u.GroupGID} }

// usersMu serializes account changes within one test binary; useradd's own
// lock on /etc/passwd serializes them across binaries, and is retried.
var usersMu sync.Mutex

// NewUser makes (or reuses) the local account name, with a primary group of
// its own and membership in group (made if missing, and kept: other tests
// may share it), and removes the account it made when t ends. Names are
// fixed per test so that an account a crashed run left behind is reused,
// not multiplied. Needs root.
func NewUser(t testing.TB, name, group string) User {
	t.Helper()
	RequiresRoot(t)
	usersMu.Lock()
	defer usersMu.Unlock()
	if _, err := user.LookupGroup(group); err != nil {
		if err := account("groupadd", group); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := user.Lookup(name); err != nil {
		if err := account("useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "-U", "-G", group, name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = account("userdel", name) })
	} else if err := account("usermod", "-a", "-G", group, name); err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	return User{Name: name, UID: atou(u.Uid), GID: atou(u.Gid), Group: group, GroupGID: atou(g.Gid)}
}

// account runs a shadow-utils command, retrying while another process
// holds the account database's lock.
func account(args ...string) error {
	var out []byte
	var err error
	for range 50 {
		out, err = exec.Command(args[0], args[1:]...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lock") {
			break
		}
		time.Sleep(100 * time.Millisecond) // the lock holder is another process; nothing to wait on
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func atou(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}
