package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/taskreserve"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// forker forks sleepers for ever: it says "full" at the first fork the
// kernel refuses, then tries again every 10 ms, so that it takes every
// task that comes free.
const forker = `
import os, time
said = False
while True:
    try:
        pid = os.fork()
    except OSError:
        if not said:
            print("full", flush=True)
            said = True
        time.sleep(0.01)
        continue
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "100000"])
`

// TestTreesLeaveTheDaemonItsTasks: a real user's tree that forks for ever
// in the daemon's cgroup (limited to 200 tasks, as systemd's TasksMax=
// limits the unit's) is held to the trees' 136 (--daemon-tasks 64), and
// to its user's half of them (--user-tasks-fraction 0.5): the daemon's
// own cgroup refuses no fork, another user's run starts (before the
// user's share, one user's loop took every task of the trees and every
// other user's run, thaw and fork failed: a red-team pass), and the
// daemon, which the Go runtime aborts when it cannot start a
// thread, still runs, and a daemon started after it, with the tree still
// forking, starts, adopts it and answers. Without the reserve the tree
// takes every task and each daemon started after it aborts
// ("pthread_create failed: Resource temporarily unavailable"). It needs a
// cgroup v1 pids hierarchy, as this VM's (it skips elsewhere); on a cgroup
// v2 host the trees' parent cgroup is cgroup.Manager's, covered by
// internal/taskreserve and internal/cgroup.
func TestTreesLeaveTheDaemonItsTasks(t *testing.T) {
	u, other := testutil.NewUser(t, "gstasks1", "gstasks"), testutil.NewUser(t, "gstasks3", "gstasks")
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	own, trees, start := daemonInPidsCgroup(t, h)
	// Started under a limit of 300, lowered to 200 as systemctl
	// set-property would: the trees' limit follows at the next start.
	if err := os.WriteFile(filepath.Join(own, "pids.max"), []byte("300"), 0); err != nil {
		t.Fatal(err)
	}
	first := start()
	if got := readTrimmed(t, filepath.Join(trees, "pids.max")); got != "236" {
		t.Fatalf("the trees' pids.max %s, want 236: the daemon's 300 less 64", got)
	}
	if err := os.WriteFile(filepath.Join(own, "pids.max"), []byte("200"), 0); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(u, "run", "bomb", "--dir", "/", "--", "python3", "-c", forker); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followUntil("bomb", "full")
	if got := readTrimmed(t, filepath.Join(trees, "pids.max")); got != "136" {
		t.Fatalf("the trees' pids.max %s, want 136: the daemon's 200, as lowered, less 64", got)
	}
	users := filepath.Join(trees, fmt.Sprintf("u%d", u.UID))
	if got := readTrimmed(t, filepath.Join(users, "pids.max")); got != "68" {
		t.Fatalf("the user's pids.max %s, want 68: half the trees' 136", got)
	}
	if events := readTrimmed(t, filepath.Join(users, "pids.events")); events == "max 0" {
		t.Fatalf("the bomb is full but its user's cgroup refused nothing: %q", events)
	}
	if _, errOut, code := h.ctlAs(other, "run", "others", "--dir", "/", "--", "sh", "-c", "sleep 0 & wait; echo forked"); code != 0 {
		t.Fatalf("another user's run with the first user's share full: %s", errOut)
	}
	h.followUntil("others", "forked")
	if events := readTrimmed(t, filepath.Join(own, "pids.events")); events != "max 0" {
		t.Fatalf("the daemon's cgroup refused forks: %q", events)
	}
	if _, errOut, code := h.ctlAs(u, "run", "late", "--dir", "/", "--", "true"); code == 0 || !strings.Contains(errOut, "pids.max") || !strings.Contains(errOut, string(api.CodeResourceExhausted)) {
		t.Fatalf("run with the trees full: exit %d, %q; want it refused, resource_exhausted, naming pids.max", code, errOut)
	}

	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()
	start()
	p, err := h.client().Process(ctxT(t), "bomb")
	if err != nil || p.State != api.StateRunning {
		t.Fatalf("the restarted daemon's bomb: %+v, %v; want it adopted, running", p, err)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "bomb"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("bomb")
}

// TestRestoreBornWithTheTrees: the CRIU that restores a real user's
// hibernated tree of 40 sleepers runs in its user's cgroup below the
// trees' pids cgroup, so that
// with the trees full (the user's own fork loop) the thaw fails cleanly,
// the process hibernated and its snapshot kept, and the daemon's own
// cgroup refuses no fork: restored into it, the tree would have taken the
// tasks kept for the daemon before it was moved. Once the loop is gone
// the thaw restores it there.
func TestRestoreBornWithTheTrees(t *testing.T) {
	u := testutil.NewUser(t, "gstasks2", "gstasks")
	h := prepareHarness(t, func(c *config.Config) { c.Group, c.CRIU = u.Group, testutil.CRIU(t) })
	own, trees, start := daemonInPidsCgroup(t, h)
	start()
	many := `for i in $(seq 40); do sleep 1000 & done; echo up; wait`
	if _, errOut, code := h.ctlAs(u, "run", "many", "--dir", "/", "--", "sh", "-c", many); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followUntil("many", "up")
	if _, errOut, code := h.ctlAs(u, "hibernate", "many"); code != 0 {
		t.Fatalf("hibernate: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(u, "run", "bomb", "--dir", "/", "--", "python3", "-c", forker); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followUntil("bomb", "full")
	if _, errOut, code := h.ctlAs(u, "thaw", "many"); code == 0 || !strings.Contains(errOut, "restore") {
		t.Fatalf("thaw with the trees full: exit %d, %q; want the restore refused", code, errOut)
	}
	if events := readTrimmed(t, filepath.Join(own, "pids.events")); events != "max 0" {
		t.Fatalf("the daemon's cgroup refused forks during the restore: %q", events)
	}
	if p, err := h.client().Process(ctxT(t), "many"); err != nil || p.State != api.StateHibernated || p.Snapshot == "" {
		t.Fatalf("after the refused thaw: %+v, %v; want it hibernated, its snapshot kept", p, err)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "bomb"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("bomb")
	if _, errOut, code := h.ctlAs(u, "thaw", "many"); code != 0 {
		t.Fatalf("thaw: %s", errOut)
	}
	p, err := h.client().Process(ctxT(t), "many")
	if err != nil || p.State != api.StateRunning {
		t.Fatalf("thawed: %+v, %v", p, err)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID))
	users := filepath.Join(trees, fmt.Sprintf("u%d", u.UID))
	if err != nil || !strings.Contains(string(data), ":pids:"+strings.TrimPrefix(users, testutil.CgroupV1Mount(t, "pids"))+"\n") {
		t.Fatalf("the thawed process's cgroups: %q, %v; want its user's below the trees' pids cgroup, %s", data, err, users)
	}
}

// daemonInPidsCgroup makes a cgroup of the v1 pids hierarchy limited to
// 200 tasks, as systemd's TasksMax= limits the unit's, and returns it, the
// trees' cgroup below it, and a start that runs the built daemon in it
// with --daemon-tasks 64 and waits until it is ready.
func daemonInPidsCgroup(t *testing.T, h *harness) (own, trees string, start func() *daemonProc) {
	mnt := testutil.CgroupV1Mount(t, "pids")
	own = filepath.Join(mnt, fmt.Sprintf("gstasks-%d-%s", os.Getpid(), t.Name()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	trees = filepath.Join(own, taskreserve.TreesGroup)
	t.Cleanup(func() {
		users, _ := filepath.Glob(filepath.Join(trees, "u*"))
		removeCgroupsOf(t, append(users, trees, own)...)
	})
	if err := os.WriteFile(filepath.Join(own, "pids.max"), []byte("200"), 0); err != nil {
		t.Fatal(err)
	}
	return own, trees, func() *daemonProc {
		return h.startBinaryVia(`echo $$ > "$0"/cgroup.procs && exec "$@"`, own, "--daemon-tasks", "64")
	}
}

// removeCgroupsOf kills what is left in each cgroup of dirs, then removes
// them, innermost first.
func removeCgroupsOf(t *testing.T, dirs ...string) {
	for _, dir := range dirs {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, dir := range dirs {
		for try := 0; try < 500; try++ {
			if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(10 * time.Millisecond) // killed processes leave as they are reaped
		}
	}
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
