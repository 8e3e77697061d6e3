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
	files = append(files, filepath.Join(h.cfg.LogDir, fmt.Sprintf("evil@%d.log", u.UID)))
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

// TestRedTeamStdoutTruncateCannotFillDisk is vector 2: a process grew its
// stdout, the log itself, to 5 GiB with ftruncate, and the daemon's
// copy-truncate rotation then wrote gigabytes of root-owned zeros. Its
// stdout is now a pipe to the supervisor, which alone writes the log: the
// log and its one rotated copy stay within the cap, in blocks too.
func TestRedTeamStdoutTruncateCannotFillDisk(t *testing.T) {
	u := testutil.NewUser(t, "gsred1", "gsred")
	const capBytes = 1 << 20
	h := newHarness(t, func(c *config.Config) { c.Group = "gsred"; c.LogMaxBytes = capBytes; c.LogKeep = 1 })
	script := `truncate -s 5G /proc/self/fd/1 2>&1; truncate -s 5G /proc/self/fd/2 2>&1; head -c 3000000 /dev/zero | tr '\0' x; echo; echo done`
	if _, errOut, code := h.ctlAs(u, "run", "filler", "--dir", "/", "--", "sh", "-c", script); code != 0 {
		t.Fatal(errOut)
	}
	if p := h.waitExit("filler"); p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
		t.Fatalf("exit %+v", p.Exit)
	}
	var total int64
	for _, name := range []string{fmt.Sprintf("filler@%d.log", u.UID), fmt.Sprintf("filler@%d.log.1", u.UID)} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(h.cfg.LogDir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Size > capBytes+64<<10 {
			t.Errorf("%s: %d bytes past the cap", name, st.Size)
		}
		total += st.Blocks * 512
	}
	if total > 2*(capBytes+64<<10)+64<<10 {
		t.Fatalf("logs take %d bytes of disk; cap %d plus one rotation", total, capBytes)
	}
	if lines := mustHarnessLogs(t, h, "filler"); lines[len(lines)-1] != "done" {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
}

// TestRedTeamRunChecksAsCaller is vector 6a: the daemon checked a run's
// dir and command as root, so whether a path exists in a directory the
// caller may not read showed in the answer. Checked as the caller, an
// existing and a missing path there are refused alike.
func TestRedTeamRunChecksAsCaller(t *testing.T) {
	u := testutil.NewUser(t, "gsred1", "gsred")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsred" })
	private := filepath.Join(h.dir, "private")
	if err := os.MkdirAll(filepath.Join(private, "exists"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	answer := func(args ...string) string {
		t.Helper()
		_, errOut, code := h.ctlAs(u, args...)
		if code == 0 {
			t.Fatalf("%v as %s succeeded", args, u.Name)
		}
		return strings.ReplaceAll(errOut, "exists", "X")
	}
	for _, pair := range [][2][]string{
		{{"run", "a", "--dir", filepath.Join(private, "exists"), "--", "true"}, {"run", "a", "--dir", filepath.Join(private, "missing"), "--", "true"}},
		{{"run", "a", "--dir", "/", "--", filepath.Join(private, "tool")}, {"run", "a", "--dir", "/", "--", filepath.Join(private, "none")}},
		{{"submit", "--name", "a", "--dir", filepath.Join(private, "exists"), "--", "true"}, {"submit", "--name", "a", "--dir", filepath.Join(private, "missing"), "--", "true"}},
	} {
		a := strings.ReplaceAll(answer(pair[0]...), "tool", "X")
		b := strings.ReplaceAll(strings.ReplaceAll(answer(pair[1]...), "missing", "X"), "none", "X")
		if a != b || !strings.Contains(a, "permission denied") {
			t.Errorf("an existing and a missing path answer differently:\n%s%s", a, b)
		}
	}
}
