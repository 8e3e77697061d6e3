package sandbox

import (
	"os"
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
	own, err := rlimit.Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := rlimit.Set{}
	for name, l := range own {
		want[name] = l
	}
	want["nofile"] = rlimit.Limit{Cur: 64, Max: 64}
	want["core"] = rlimit.Limit{Cur: 0, Max: 1 << 20}
	want["fsize"] = rlimit.Limit{Cur: 1 << 20, Max: 2 << 20}
	want["nproc"] = rlimit.Limit{Cur: 200, Max: 300}
	s := tr.asUser(tr.spec("sh", "-c", `ulimit -Hn 65 2>/dev/null && echo raised || echo refused; exec sleep 1000`), u)
	s.Rlimits = want
	st, err := Start(ctx(t), s)
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
	if err := unix.PidfdSendSignal(st.Pidfd, unix.SIGTERM, nil, 0); err != nil {
		t.Fatal(err)
	}
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
