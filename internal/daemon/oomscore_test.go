package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/oomscore"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The unit runs the daemon at oom_score_adj -900 and its callers run at 0
// or 100 (Debian 12's user@.service). Lowering a process takes
// CAP_SYS_RESOURCE, which root lacks on this VM, so these tests open the
// same gap the other way: the daemon where it starts, or raised, and a
// caller above it. Raising needs no capability.

// hog forks children of about 14 MiB each (4 MiB of their own), more than
// a memory cgroup of 300 MiB holds, each smaller than the daemon, and says
// "lost" for each one killed.
const hog = `
import os, threading, time
def reap():
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            time.sleep(0.01)
            continue
        if os.WIFSIGNALED(status):
            print("lost", pid, os.WTERMSIG(status), flush=True)
threading.Thread(target=reap, daemon=True).start()
for i in range(120):
    if os.fork() == 0:
        b = bytearray(4 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(100000)
        os._exit(0)
    time.sleep(0.01)
time.sleep(100000)
`

// TestOOMKillerSparesTheDaemon: a real user's tree that fills the memory
// cgroup it shares with the daemon (on cgroup v1, every tree of a user
// with no delegated cgroup) with processes smaller than the daemon has
// the kernel's OOM killer kill the tree's, and the daemon serves on. The
// killer picks the largest process, its size plus oom_score_adj weighed
// against the cgroup's limit: with the trees at the daemon's own value
// that is the daemon (without the code: "the OOM killer killed the
// daemon"). It needs a cgroup v1 memory hierarchy, as this VM's.
func TestOOMKillerSparesTheDaemon(t *testing.T) {
	mnt := testutil.CgroupV1Mount(t, "memory")
	u := testutil.NewUser(t, "gsoom1", "gsoom")
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	own := filepath.Join(mnt, fmt.Sprintf("gsoom-%d-%s", os.Getpid(), t.Name()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupsOf(t, own) })
	if err := os.WriteFile(filepath.Join(own, "memory.limit_in_bytes"), []byte("300M"), 0); err != nil {
		t.Fatal(err)
	}
	dp := h.startBinaryVia(`echo $$ > "$0"/cgroup.procs && exec "$@"`, own)
	if _, errOut, code := h.ctlLaunched(u, nil, "", callerAt(300, h.bins.Ctl), "run", "hog", "--dir", "/", "--", "python3", "-c", hog); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	lost := errors.New("lost")
	err := h.client().FollowLogs(ctxT(t), "hog", -1, func(l string) error {
		if strings.HasPrefix(l, "lost") {
			return lost
		}
		return nil
	})
	if st, serr := procfs.ReadStat(dp.cmd.Process.Pid); serr != nil || st.State == 'Z' {
		t.Fatalf("the OOM killer killed the daemon (the hog's log: %v)", err)
	}
	if !errors.Is(err, lost) {
		t.Fatalf("following the hog: %v", err)
	}
	if c := readTrimmed(t, filepath.Join(own, "memory.oom_control")); !strings.Contains(c, "oom_kill ") || strings.Contains(c, "oom_kill 0") {
		t.Fatalf("a process of the hog was killed, not by the OOM killer: %q", c)
	}
	if _, err := h.client().PS(ctxT(t), api.PSParams{}); err != nil {
		t.Fatalf("the daemon after the OOM: %v", err)
	}
}

// TestTreesTakeTheCallersOOMScore: a tree runs at the oom_score_adj of
// the process that asked for it, not the daemon's: run, queued as a job,
// and restored from disk, where CRIU writes only a value other than 0 and
// the restored processes take the rest from its worker.
func TestTreesTakeTheCallersOOMScore(t *testing.T) {
	u := testutil.NewUser(t, "gsoom2", "gsoom")
	h := prepareHarness(t, func(c *config.Config) { c.Group, c.CRIU = u.Group, testutil.CRIU(t) })
	h.startBinaryVia(`echo 500 > /proc/self/oom_score_adj && exec "$@"`, "gpuschedd")
	as := func(adj int, args ...string) {
		t.Helper()
		if _, errOut, code := h.ctlLaunched(u, nil, "", callerAt(adj, h.bins.Ctl), args...); code != 0 {
			t.Fatalf("%v from a caller at %d: %s", args, adj, errOut)
		}
	}
	up := []string{"--dir", "/", "--", "sh", "-c", "echo up; exec sleep 100000"}
	as(200, append([]string{"run", "raised"}, up...)...)
	as(200, append([]string{"submit", "--name", "queued"}, up...)...)
	as(0, append([]string{"run", "plain"}, up...)...)
	h.waitJobState("queued", api.JobRunning)
	for name, adj := range map[string]int{"raised": 200, "queued": 200, "plain": 0} {
		h.followUntil(name, "up")
		p, err := h.client().Process(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		wantOOMScore(t, p, adj)
	}
	as(0, "hibernate", "plain")
	as(0, "thaw", "plain")
	p, err := h.client().Process(ctxT(t), "plain")
	if err != nil || p.State != api.StateRunning {
		t.Fatalf("thawed: %+v, %v", p, err)
	}
	wantOOMScore(t, p, 0)
}

// callerAt is the command line that runs ctl at oom_score_adj adj.
func callerAt(adj int, ctl string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`echo %d > /proc/self/oom_score_adj && exec "$0" "$@"`, adj), ctl}
}

// wantOOMScore checks the oom_score_adj of p's supervisor and command.
func wantOOMScore(t *testing.T, p *api.Process, want int) {
	t.Helper()
	for _, pid := range []int{p.InitPID, p.PID} {
		if got, err := oomscore.Of(pid); err != nil || got != want {
			t.Errorf("%s: pid %d runs at oom_score_adj %d (%v), want %d", p.Name, pid, got, err, want)
		}
	}
}
