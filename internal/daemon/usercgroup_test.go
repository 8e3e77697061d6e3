package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// userCgroup makes top/user-UID, given to u as systemd's Delegate= gives
// user@UID.service to its user when delegate is set, else left root's.
func userCgroup(t testing.TB, top string, u testutil.User, delegate bool) string {
	t.Helper()
	dir := filepath.Join(top, "user-"+strconv.FormatUint(uint64(u.UID), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if delegate {
		for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.threads"), filepath.Join(dir, "cgroup.subtree_control")} {
			if err := os.Chown(p, int(u.UID), int(u.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestUserCgroupHoldsTree: a user's process runs, supervisor and all, in a
// cgroup of its own inside the cgroup delegated to that user, which is
// removed when it ends; a user whose cgroup at the same place is not
// theirs keeps today's placement.
func TestUserCgroupHoldsTree(t *testing.T) {
	mnt, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gsrlimcg1", "gsrlim")
	other := testutil.NewUser(t, "gsrlimcg2", "gsrlim")
	own := userCgroup(t, top, u, true)
	notOwn := userCgroup(t, top, other, false)
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group; c.UserCgroups = filepath.Join(top, "user-%U") })

	for _, who := range []testutil.User{u, other} {
		if _, errOut, code := h.ctlAs(who, "run", who.Name, "--dir", "/", "--", "sleep", "1000"); code != 0 {
			t.Fatalf("run as %s: %s", who.Name, errOut)
		}
	}
	p, err := h.client().Process(ctxT(t), u.Name)
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(own, "gpusched-"+p.ID)
	want := strings.TrimPrefix(tree, mnt)
	for what, pid := range map[string]int{"command": p.PID, "supervisor": p.InitPID} {
		if got := testutil.CgroupOf(t, pid); got != want {
			t.Errorf("%s of %s's tree is in cgroup %s, want %s", what, u.Name, got, want)
		}
	}
	q, err := h.client().Process(ctxT(t), other.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.CgroupOf(t, q.PID); strings.HasPrefix(got, strings.TrimPrefix(top, mnt)+"/") {
		t.Errorf("%s's tree went into cgroup %s, under %s which is not theirs", other.Name, got, notOwn)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: u.Name}); err != nil {
		t.Fatal(err)
	}
	h.waitExit(u.Name)
	if _, err := os.Stat(tree); err == nil {
		t.Errorf("cgroup %s of an ended tree is still there", tree)
	}
}

// TestUserCgroupLimitsBindTree: a pids.max on the user's cgroup binds the
// managed process (its forks past it fail), as the user's systemd
// TasksMax does. It needs the pids controller in cgroup v2.
func TestUserCgroupLimitsBindTree(t *testing.T) {
	_, top := testutil.CgroupTop(t)
	if b, _ := os.ReadFile(filepath.Join(top, "cgroup.controllers")); !slices.Contains(strings.Fields(string(b)), "pids") {
		t.Skip("the pids controller is not available in cgroup v2 here (a cgroup v1 or hybrid host)")
	}
	if err := os.WriteFile(filepath.Join(top, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		t.Fatal(err)
	}
	u := testutil.NewUser(t, "gsrlimcg3", "gsrlim")
	own := userCgroup(t, top, u, true)
	dir, err := os.MkdirTemp("", "gsrlim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fifo := filepath.Join(dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o755, fifo: 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group; c.UserCgroups = filepath.Join(top, "user-%U") })
	// dash gives up at the first fork it cannot make; either way the
	// command ends, and its tree with it.
	script := `echo up; read x < ` + fifo + `; for i in 1 2 3 4 5 6; do sleep 1000 & done; echo spawned`
	if _, errOut, code := h.ctlAs(u, "run", "forker", "--dir", "/", "--", "sh", "-c", script); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followCount("forker", "up", 1)
	cur, err := os.ReadFile(filepath.Join(own, "pids.current"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(cur)))
	if err != nil {
		t.Fatal(err)
	}
	// Two more tasks at most: at least four of the six forks fail.
	if err := os.WriteFile(filepath.Join(own, "pids.max"), []byte(strconv.Itoa(n+2)), 0); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("go\n")
	w.Close()
	h.waitExit("forker")
	lines, err := h.client().Logs(ctxT(t), "forker", -1)
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(lines, "\n"); !strings.Contains(text, "Cannot fork") {
		t.Errorf("every fork past the user's pids.max succeeded; log:\n%s", text)
	}
}
