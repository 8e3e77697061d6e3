package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// limits the unit's) is held to the trees' 136 (--daemon-tasks 64), so
// that the daemon, which the Go runtime aborts when it cannot start a
// thread, still runs, and a daemon started after it, with the tree still
// forking, starts, adopts it and answers. Without the reserve the tree
// takes every task and each daemon started after it aborts
// ("pthread_create failed: Resource temporarily unavailable"). It needs a
// cgroup v1 pids hierarchy, as this VM's; on a cgroup v2 host the trees'
// parent cgroup is cgroup.Manager's, covered by internal/taskreserve and
// internal/cgroup.
func TestTreesLeaveTheDaemonItsTasks(t *testing.T) {
	mnt := v1PidsMount(t)
	u := testutil.NewUser(t, "gstasks1", "gstasks")
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	own := filepath.Join(mnt, fmt.Sprintf("gstasks-%d", os.Getpid()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	trees := filepath.Join(own, taskreserve.TreesGroup)
	t.Cleanup(func() { removeCgroupsOf(t, trees, own) })
	if err := os.WriteFile(filepath.Join(own, "pids.max"), []byte("200"), 0); err != nil {
		t.Fatal(err)
	}
	start := func() *daemonProc {
		n := testutil.NewNotify(t, h.dir)
		args := append([]string{"-c", `echo $$ > "$0"/cgroup.procs && exec "$@"`, own, h.bins.Daemon}, h.binaryArgs()...)
		dp := h.spawnBinary(exec.Command("sh", append(args, "--daemon-tasks", "64")...), "NOTIFY_SOCKET="+n.Path)
		n.WaitFor(t, "READY=1", 30*time.Second)
		return dp
	}
	first := start()
	if _, errOut, code := h.ctlAs(u, "run", "bomb", "--dir", "/", "--", "python3", "-c", forker); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followUntil("bomb", "full")
	if got := readTrimmed(t, filepath.Join(trees, "pids.max")); got != "136" {
		t.Fatalf("the trees' pids.max %s, want 136: the daemon's 200 less 64", got)
	}
	if events := readTrimmed(t, filepath.Join(trees, "pids.events")); events == "max 0" {
		t.Fatalf("the bomb is full but its cgroup refused nothing: %q", events)
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

// v1PidsMount is where this host mounts the cgroup v1 pids hierarchy; the
// test is skipped without one.
func v1PidsMount(t *testing.T) string {
	t.Helper()
	testutil.RequiresRoot(t)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if i := slices.Index(fields, "-"); i > 4 && i+3 < len(fields) && fields[i+1] == "cgroup" && slices.Contains(strings.Split(fields[i+3], ","), "pids") {
			return fields[4]
		}
	}
	t.Skip("no cgroup v1 pids hierarchy here (a cgroup v2 host: internal/taskreserve and internal/cgroup cover the trees' parent there)")
	return ""
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
