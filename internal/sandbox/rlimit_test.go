package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/rlimit"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestCommandGetsCallersLimits: the command of an unprivileged user runs
// under exactly the limits of the spec, soft and hard, and cannot raise a
// hard one; the supervisor keeps the limits it was started with.
func TestCommandGetsCallersLimits(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsrlim1", "gsrlim")
	_, own, want := testutil.CallerLimits(t)
	// The command waits on a FIFO once it has tried: opening the FIFO's
	// other end returns once it has got there.
	fifo := filepath.Join(tr.dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	s := tr.asUser(tr.spec("sh", "-c", `ulimit -Hn 65 2>/dev/null && echo raised || echo refused; read x < `+fifo), u)
	s.Rlimits = want
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := rlimit.Of(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := rlimit.Of(st.InitPID)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	tr.wait(st)
	for name, l := range want {
		if cmd[name] != l {
			t.Errorf("command's %s = %+v, want %+v", name, cmd[name], l)
		}
		if sup[name] != own[name] {
			t.Errorf("supervisor's %s = %+v, want the daemon's %+v", name, sup[name], own[name])
		}
	}
	if got := strings.TrimSpace(tr.logText()); got != "refused" {
		t.Errorf("raising the hard nofile limit: %q, want refused", got)
	}
}

// TestSmallAddressSpaceLargeEnvironment: an address-space limit far below
// the exec stage's own size (a Go binary maps far more than 64 MiB), with
// an environment near the kernel's 2 MiB bound, still runs the command
// under that limit: after the limit is in force the stage maps nothing
// new. The supervisor is the daemon's binary, built as it ships (the race
// detector's runtime alone maps more than the limit).
func TestSmallAddressSpaceLargeEnvironment(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsrlim1", "gsrlim")
	s := tr.asUser(tr.spec("sh", "-c", "ulimit -v"), u)
	s.SupervisorPath = testutil.Build(t).Daemon
	for i := range 50 {
		s.Env = append(s.Env, fmt.Sprintf("BIG%d=%s", i, strings.Repeat("x", 120<<10)))
	}
	// A 32 MiB stack limit lets execve take 8 MiB of arguments.
	s.Rlimits = rlimit.Set{"as": {Cur: 64 << 20, Max: 64 << 20}, "stack": {Cur: 32 << 20, Max: 32 << 20}}
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	r := tr.wait(st)
	if got := strings.TrimSpace(tr.logText()); r.Code == nil || *r.Code != 0 || got != "65536" {
		t.Fatalf("report %+v, log %.300q; want code 0 and 65536 (KiB)", r, got)
	}
}

// TestBadLimitsStartNothing: a set the kernel could not hold is refused
// before anything starts.
func TestBadLimitsStartNothing(t *testing.T) {
	tr := newTree(t)
	s := tr.spec("true")
	s.Rlimits = rlimit.Set{"nofile": {Cur: 10, Max: 5}}
	s.Recorded = func(int, uint64) error { t.Error("a supervisor started"); return nil }
	if _, err := Start(ctx(t), s); err == nil || !strings.Contains(err.Error(), "above hard limit") {
		t.Fatalf("err = %v", err)
	}
}
