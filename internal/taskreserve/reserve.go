package taskreserve

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// TreesGroup is the cgroup of the v1 pids hierarchy, below the daemon's
// own, that holds its trees.
const TreesGroup = "gpusched-trees"

// ErrUnavailable means no pids cgroup can hold the trees here; the error
// wrapping it says why.
var ErrUnavailable = errors.New("no pids cgroup for the managed trees")

// Paths are the files Detect reads; tests give others.
type Paths struct {
	Self      string // this process's cgroups: /proc/self/cgroup
	MountInfo string // its mounts: /proc/self/mountinfo
	Kernel    string // holds pid_max and threads-max: /proc/sys/kernel
}

// HostPaths are this host's.
func HostPaths() Paths {
	return Paths{Self: "/proc/self/cgroup", MountInfo: "/proc/self/mountinfo", Kernel: "/proc/sys/kernel"}
}

// Reserve is the pids cgroup of the managed trees.
type Reserve struct {
	dir    string // the pids cgroup the trees go in
	mount  string // the root of the hierarchy dir is in
	move   bool   // v1: trees are moved into dir; v2: their own cgroups are below it
	kernel string
	kept   int64 // tasks kept for the daemon

	userShare float64 // share of max one non-root user's trees may hold (0: no share of their own)

	mu    sync.Mutex
	limit int64            // what the daemon's cgroup may hold, trees and all, when max was written
	max   int64            // dir's pids.max, as last written
	users map[string]int64 // users' cgroups below dir (v1), and their pids.max as last written
}

// ShareByUser gives each non-root user's trees a cgroup of their own below
// the trees' (cgroup v1), holding at most frac of what the trees may: one
// user's thread loop took every task of the trees and every other user's
// run, job start, thaw and fork failed (a red-team pass, 2026-11-29).
// frac 0 or 1: none. Call it before Setup.
func (r *Reserve) ShareByUser(frac float64) {
	if frac > 0 && frac < 1 {
		r.userShare = frac
	}
}

// Detect finds the pids cgroup of the trees without changing anything.
// v2Parent is the cgroup v2 directory holding the trees' own cgroups
// (cgroup.Manager's Parent), "" where the daemon has none; its parent must
// offer the pids controller. Otherwise the trees go in TreesGroup below
// the daemon's cgroup of a v1 pids hierarchy. kept is the reserve, at
// least 1.
func Detect(kept int, v2Parent string, p Paths) (*Reserve, error) {
	if kept < 1 {
		return nil, fmt.Errorf("a reserve of %d tasks: %w", kept, ErrUnavailable)
	}
	mounts, err := readMounts(p.MountInfo)
	if err != nil {
		return nil, err
	}
	r := &Reserve{kernel: p.Kernel, kept: int64(kept)}
	if v2Parent != "" {
		r.dir = filepath.Clean(v2Parent)
		r.mount = mounts.under(r.dir, "cgroup2")
		if r.mount == "" {
			return nil, unavailable("%s is not on a cgroup2 mount", r.dir)
		}
		parent := filepath.Dir(r.dir)
		data, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(data)), "pids") {
			return nil, unavailable("the pids controller is not available in %s: delegate it (systemd Delegate=yes)", parent)
		}
		return r, nil
	}
	rel, err := v1Cgroup(p.Self, "pids")
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if m.fstype == "cgroup" && slices.Contains(m.options, "pids") {
			r.mount = m.point
		}
	}
	if r.mount == "" {
		return nil, unavailable("no cgroup v1 pids hierarchy is mounted")
	}
	r.dir, r.move = filepath.Join(r.mount, rel, TreesGroup), true
	return r, nil
}

// Setup makes the trees' cgroup and sets its pids.max from what the
// daemon's cgroup may hold then; it is idempotent. On cgroup v2 the pids
// controller must be enabled in the parent of the trees' cgroup by then
// (cgroup.Manager.Setup does in a delegated cgroup).
func (r *Reserve) Setup() error {
	if r.move {
		if err := os.Mkdir(r.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make %s: %w", r.dir, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apply()
}

// Refresh sets the trees' pids.max again when the limit above it has
// changed since (systemctl set-property ... TasksMax=): a few small reads
// when it has not.
func (r *Reserve) Refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apply()
}

// apply writes the trees' pids.max for the limit now, unless it is the
// one written last; the caller holds mu.
func (r *Reserve) apply() error {
	limit, err := r.effectiveLimit()
	if err != nil {
		return err
	}
	if limit == r.limit {
		return nil
	}
	trees := limit - r.kept
	if r.kept > limit/2 {
		trees = limit / 2 // a small cgroup: half for each
	}
	path := filepath.Join(r.dir, "pids.max")
	if err := os.WriteFile(path, []byte(strconv.FormatInt(trees, 10)), 0); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	r.limit, r.max = limit, trees
	for dir := range r.users {
		if err := r.limitUser(dir); err != nil {
			return err
		}
	}
	return nil
}

// limitUser writes a user's cgroup's pids.max for the trees' max now,
// unless it was written for it; the caller holds mu.
func (r *Reserve) limitUser(dir string) error {
	userMax := max(1, int64(r.userShare*float64(r.max)))
	if r.users[dir] == userMax {
		return nil
	}
	path := filepath.Join(dir, "pids.max")
	if err := os.WriteFile(path, []byte(strconv.FormatInt(userMax, 10)), 0); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	r.users[dir] = userMax
	return nil
}

// cgroupOf is the cgroup uid's trees go in, made and limited where it is a
// user's own (ShareByUser): root's and, without shares, everyone's go in
// the trees' own.
func (r *Reserve) cgroupOf(uid uint32) (string, error) {
	if uid == 0 || r.userShare == 0 {
		return r.dir, nil
	}
	dir := filepath.Join(r.dir, "u"+strconv.FormatUint(uint64(uid), 10))
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.users[dir]; ok {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("make %s: %w", dir, err)
	}
	if r.users == nil {
		r.users = map[string]int64{}
	}
	r.users[dir] = 0
	if err := r.limitUser(dir); err != nil {
		delete(r.users, dir)
		return "", err
	}
	return dir, nil
}

// Place puts a process of uid's tree in its cgroup (cgroupOf), where trees
// are moved into one (cgroup v1); what it forks later is born there. On
// cgroup v2 the tree's own cgroup is below the trees' already.
func (r *Reserve) Place(pid int, uid uint32) error {
	if !r.move {
		return nil
	}
	dir, err := r.cgroupOf(uid)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, dir, err)
	}
	return nil
}

// Dir is the trees' pids cgroup.
func (r *Reserve) Dir() string { return r.dir }

// Join is the cgroup a process is moved into for all it forks to be held
// with uid's trees (CRIU, for the tree it restores): theirs where trees are
// moved into one (cgroup v1), "" on cgroup v2, where each tree's own cgroup
// is made below the trees', or where it cannot be made.
func (r *Reserve) Join(uid uint32) string {
	if !r.move {
		return ""
	}
	dir, err := r.cgroupOf(uid)
	if err != nil {
		return r.dir
	}
	return dir
}

// Max is the trees' pids.max as last written.
func (r *Reserve) Max() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max
}

// Limit is what the daemon's cgroup may hold in all, trees included, as
// found when Max was written.
func (r *Reserve) Limit() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.limit
}

// effectiveLimit is the least pids.max of the daemon's cgroup and its
// ancestors, and of the kernel's pid_max and threads-max.
func (r *Reserve) effectiveLimit() (int64, error) {
	limit := int64(-1)
	lower := func(n int64) {
		if limit < 0 || n < limit {
			limit = n
		}
	}
	for _, name := range []string{"pid_max", "threads-max"} {
		n, err := readInt(filepath.Join(r.kernel, name))
		if err != nil {
			return 0, err
		}
		lower(n)
	}
	for dir := filepath.Dir(r.dir); strings.HasPrefix(dir, r.mount); dir = filepath.Dir(dir) {
		data, err := os.ReadFile(filepath.Join(dir, "pids.max"))
		if err == nil && strings.TrimSpace(string(data)) != "max" {
			n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q is not a number of tasks", filepath.Join(dir, "pids.max"), data)
			}
			lower(n)
		}
		if dir == r.mount {
			break // the root cgroup has no pids.max
		}
	}
	return limit, nil
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", path, err)
	}
	return n, nil
}

// v1Cgroup is this process's cgroup in the v1 hierarchy of controller,
// from a /proc/self/cgroup line such as "8:pids:/system.slice/x.service".
func v1Cgroup(selfFile, controller string) (string, error) {
	data, err := os.ReadFile(selfFile)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2], nil
		}
	}
	return "", unavailable("no cgroup v1 %s hierarchy holds this process, and no cgroup v2 one is delegated to it", controller)
}

type mount struct {
	point, fstype string
	options       []string // the super options
}

type mountList []mount

// readMounts reads the cgroup mounts of a mountinfo file: "36 25 0:31 /
// /sys/fs/cgroup/pids rw,relatime shared:14 - cgroup cgroup rw,pids".
func readMounts(path string) (mountList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out mountList
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 5 || i+3 >= len(fields) || !strings.HasPrefix(fields[i+1], "cgroup") {
			continue
		}
		out = append(out, mount{point: fields[4], fstype: fields[i+1], options: strings.Split(fields[i+3], ",")})
	}
	return out, sc.Err()
}

// under is the longest mount point of fstype holding dir.
func (ms mountList) under(dir, fstype string) string {
	best := ""
	for _, m := range ms {
		if m.fstype == fstype && (dir == m.point || strings.HasPrefix(dir, m.point+"/")) && len(m.point) > len(best) {
			best = m.point
		}
	}
	return best
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnavailable)
}
