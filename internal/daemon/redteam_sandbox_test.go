package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// runAttacker runs the attacker as u, preloaded into everything it starts
// (with extra --env values), then sleeping; it returns once the three
// attacks (the preloaded constructor and main of the attacker, the
// constructor in sleep) are logged, with their lines.
func runAttacker(t *testing.T, h *harness, u testutil.User, name string, extra ...string) []string {
	t.Helper()
	a := testutil.BuildAttacker(t)
	args := []string{"run", name, "--gpu", "0", "--clean-env", "--env", "PATH=/usr/bin:/bin", "--env", "LD_PRELOAD=" + a.Preload}
	args = append(args, extra...)
	args = append(args, "--", a.Bin, "sleep", "1000")
	if _, errOut, code := h.ctlAs(u, args...); code != 0 {
		t.Fatalf("run %s as %s: exit %d: %s", name, u.Name, code, errOut)
	}
	h.followCount(name, "attacker:", 3)
	var attacks []string
	for _, l := range mustHarnessLogs(t, h, name) {
		if strings.HasPrefix(l, "attacker:") {
			attacks = append(attacks, l)
		}
	}
	if len(attacks) != 3 {
		t.Fatalf("%d attacks logged: %q", len(attacks), attacks)
	}
	return attacks
}

func mustHarnessLogs(t *testing.T, h *harness, name string) []string {
	t.Helper()
	lines, err := h.client().Logs(ctxT(t), name, -1)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestRedTeamPreloadCannotCrashDaemon is vector 1: a caller's LD_PRELOAD
// library and pidfd_getfd go after every descriptor they can reach
// (growing regular files to 1 TiB, forging handshake lines). Before the
// supervisor, the init ran with the caller's environment and held the
// root-owned status file as fd 3: the daemon read it whole and died of
// "out of memory", at every restart. Now nothing is reached, the exit is
// recorded, and the daemon restarts cleanly.
func TestRedTeamPreloadCannotCrashDaemon(t *testing.T) {
	u := testutil.NewUser(t, "gsred1", "gsred")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsred" })
	for _, l := range runAttacker(t, h, u, "evil") {
		if !strings.Contains(l, " took 0 fds (pids), grew 0 files, ptrace parent: Operation not permitted, environ parent: Permission denied") {
			t.Errorf("attack reached something: %s", l)
		}
	}
	if _, errOut, code := h.ctlAs(u, "kill", "evil"); code != 0 {
		t.Fatal(errOut)
	}
	if p := h.waitExit("evil"); p.Exit == nil || p.Exit.Signal != "SIGTERM" {
		t.Fatalf("exit %+v, want SIGTERM", p.Exit)
	}
	files, _ := filepath.Glob(filepath.Join(h.cfg.StateDir, "status", "*"))
	files = append(files, filepath.Join(h.cfg.LogDir, "evil.log"))
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Size() > 64<<10 {
			t.Fatalf("%s: %v, size %d", f, err, fi.Size())
		}
	}
	h.stop()
	h.start()
	if p, err := h.client().Process(ctxT(t), "evil"); err != nil || p.State != api.StateExited {
		t.Fatalf("after restart: %+v, %v", p, err)
	}
}

// TestRedTeamForgedStartCannotRenice is vector 3: the daemon used to
// renice, as root, whatever pid the init reported in "started"; the
// caller's preloaded code forges that line on every descriptor, naming a
// root process. The root process keeps its nice value; the caller's
// process gets the one it asked for.
func TestRedTeamForgedStartCannotRenice(t *testing.T) {
	u := testutil.NewUser(t, "gsred1", "gsred")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsred" })
	victim := exec.Command("sleep", "1000")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	before, err := unix.Getpriority(unix.PRIO_PROCESS, victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	runAttacker(t, h, u, "nicer", "--nice", "5", "--env", fmt.Sprintf("ATTACK_VICTIM=%d", victim.Process.Pid))
	if after, _ := unix.Getpriority(unix.PRIO_PROCESS, victim.Process.Pid); after != before {
		t.Fatalf("root's process went from priority %d to %d", before, after)
	}
	p, err := h.client().Process(ctxT(t), "nicer")
	if err != nil {
		t.Fatal(err)
	}
	if got := niceOf(t, p.PID); got != 5 {
		t.Fatalf("the caller's process runs at nice %d, want 5", got)
	}
}

// niceOf reads a process's nice value (field 19 of /proc/<pid>/stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var n int
	fmt.Sscan(f[16], &n)
	return n
}
