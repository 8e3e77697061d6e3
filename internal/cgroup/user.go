package cgroup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// userPrefix begins the name of a tree's cgroup in its owner's delegated
// cgroup; the tree's record id follows.
const userPrefix = "gpusched-"

// Users places managed trees under their owners' own cgroups, so that the
// limits and accounting systemd gives a user (TasksMax, MemoryMax and the
// CPU share of user-UID.slice) cover what the daemon runs for them.
//
// A cgroup is delegated to a user when it is a cgroup2 directory that the
// user owns together with its cgroup.procs, as systemd's Delegate= leaves
// the cgroup of a unit that runs as that user (user@UID.service): the user
// may create cgroups in it and move their own processes within it, and
// nobody else's limits are at stake there. The daemon never writes into a
// cgroup that systemd keeps for itself (root-owned slices).
//
// A user manager's cgroup (user@UID.service) is used only while the user
// lingers (loginctl enable-linger): without it, systemd stops the manager,
// and every process in its cgroup, when the user's last session ends, and a
// managed process must outlive its caller's login.
type Users struct {
	pattern string // the user's delegated cgroup; %U stands for the uid
}

// LingerDir holds a file named after each user whose systemd user manager
// outlives their sessions (loginctl enable-linger).
var LingerDir = "/var/lib/systemd/linger"

// NewUsers finds users' delegated cgroups at pattern, an absolute path in
// which %U stands for the uid, e.g.
// /sys/fs/cgroup/user.slice/user-%U.slice/user@%U.service.
func NewUsers(pattern string) *Users { return &Users{pattern: pattern} }

// Dir is the cgroup tree id of user uid (named user) belongs in:
// userPrefix+id in the cgroup delegated to uid, or "" when uid has none (no
// such directory, not cgroup2, not the user's, or a user manager's that
// ends with the user's sessions) and the tree goes where Manager puts it.
func (u *Users) Dir(uid uint32, user, id string) string {
	if validID(id) != nil {
		return ""
	}
	uidStr := strconv.FormatUint(uint64(uid), 10)
	parent := strings.ReplaceAll(u.pattern, "%U", uidStr)
	if !isCgroup2(parent) || ownedBy(parent, uid) != nil || ownedBy(filepath.Join(parent, "cgroup.procs"), uid) != nil {
		return ""
	}
	if filepath.Base(parent) == "user@"+uidStr+".service" && !lingers(user) {
		return ""
	}
	return filepath.Join(parent, userPrefix+id)
}

// lingers reports whether user's systemd user manager outlives their
// sessions.
func lingers(user string) bool {
	if user == "" || strings.ContainsAny(user, "/\x00") || user == "." || user == ".." {
		return false
	}
	_, err := os.Stat(filepath.Join(LingerDir, user))
	return err == nil
}

// Place puts pid in dir (from Dir), created when missing, with the
// cpu.weight of nice where the user's cgroup hands the cpu controller
// down (else only nice applies). As with Manager.Place, children pid
// already has stay where they are.
func (u *Users) Place(dir string, pid, nice int) error {
	if err := checkUserDir(dir); err != nil {
		return err
	}
	if err := mkdir(dir); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	// The user may have made dir first (it is in their cgroup): write only
	// into a cgroup2 directory there, never through anything else.
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || !isCgroup2(dir) {
		return fmt.Errorf("cgroup %s: not a cgroup2 directory: %w", dir, fs.ErrInvalid)
	}
	weight := filepath.Join(dir, "cpu.weight")
	if _, err := os.Stat(weight); err == nil {
		if err := writeFile(weight, strconv.FormatUint(Weight(nice), 10)); err != nil {
			return fmt.Errorf("cgroup %s: cpu.weight: %w", dir, err)
		}
	}
	if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("cgroup %s: move pid %d: %w", dir, pid, err)
	}
	return nil
}

// Make makes dir (from Dir) unless it is there, for a process the daemon
// starts on the user's behalf to be moved into (Move). The user may have
// made dir first (it is in their cgroup): it must be a cgroup2 directory,
// not a link. In a cgroup the user made, the process is theirs to freeze,
// move or kill.
func (u *Users) Make(dir string) error {
	if err := checkUserDir(dir); err != nil {
		return err
	}
	if err := mkdir(dir); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || !isCgroup2(dir) {
		return fmt.Errorf("cgroup %s: not a cgroup2 directory: %w", dir, fs.ErrInvalid)
	}
	return nil
}

// maxEvents bounds what is read of a cgroup.events file (two short lines).
const maxEvents = 4 << 10

// Frozen reports whether cgroup dir is frozen: by its own cgroup.freeze or
// one above it, which in a user's delegated cgroup the user may write
// ("frozen 1" in cgroup.events). A cgroup that is gone is not frozen.
func Frozen(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxEvents))
	for _, l := range strings.Split(string(b), "\n") {
		if l == "frozen 1" {
			return true
		}
	}
	return false
}

// Remove deletes dir (from Dir) once its processes are gone, waiting a
// little for the last ones as Manager.Remove does; a missing cgroup is not
// an error.
func (u *Users) Remove(dir string) error {
	if err := checkUserDir(dir); err != nil {
		return err
	}
	if err := rmdirRetry(dir, 20); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return nil
}

// checkUserDir refuses a path that Dir cannot have returned.
func checkUserDir(dir string) error {
	id, ok := strings.CutPrefix(filepath.Base(dir), userPrefix)
	if !ok || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("%q: %w", dir, ErrInvalidID)
	}
	return validID(id)
}

// ownedBy checks that path exists and belongs to uid.
func ownedBy(path string, uid uint32) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != uid {
		return fmt.Errorf("%s: not owned by uid %d: %w", path, uid, fs.ErrPermission)
	}
	return nil
}

// writeFile writes one value to an existing interface file.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	return errors.Join(err, f.Close())
}

// maxProcCgroup bounds what is read of /proc/PID/cgroup.
const maxProcCgroup = 64 << 10

// FrozenOf is the cgroup v2 directory process pid is in while that cgroup
// is frozen (Frozen), else "": also for a process that is gone, and on a
// host without a cgroup2 hierarchy at Mount or Mount/unified.
func FrozenOf(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxProcCgroup))
	for _, l := range strings.Split(string(b), "\n") {
		rel, ok := strings.CutPrefix(l, "0::")
		if !ok {
			continue
		}
		for _, mnt := range []string{Mount, filepath.Join(Mount, "unified")} {
			if !isCgroup2(mnt) {
				continue
			}
			if dir := filepath.Join(mnt, rel); Frozen(dir) {
				return dir
			}
			return ""
		}
	}
	return ""
}
