package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// followUntil follows name's log until a line starting with want appears.
func (h *harness) followUntil(name, want string) {
	h.t.Helper()
	found := errors.New("found")
	err := h.client().FollowLogs(ctxT(h.t), name, -1, func(l string) error {
		if strings.HasPrefix(l, want) {
			return found
		}
		return nil
	})
	if !errors.Is(err, found) {
		h.t.Fatalf("log of %s never showed %q: %v", name, want, err)
	}
}

// followCount follows name's log until n lines start with prefix.
func (h *harness) followCount(name, prefix string, n int) {
	h.t.Helper()
	found := errors.New("found")
	seen := 0
	err := h.client().FollowLogs(ctxT(h.t), name, -1, func(l string) error {
		if strings.HasPrefix(l, prefix) {
			seen++
		}
		if seen == n {
			return found
		}
		return nil
	})
	if !errors.Is(err, found) {
		h.t.Fatalf("log of %s showed %d of %d lines %q: %v", name, seen, n, prefix, err)
	}
}

func TestKillEscalatesToSigkillAfterGrace(t *testing.T) {
	h := newHarness(t)
	h.run("stubborn", "sh", "-c", `trap "" TERM; echo ready; exec sleep 1000`)
	h.followUntil("stubborn", "ready")
	p, err := h.client().Kill(ctxT(t), api.KillParams{Name: "stubborn", Grace: api.Duration(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if p.State != api.StateExited || p.Exit == nil || p.Exit.Signal != "SIGKILL" {
		t.Fatalf("got %+v exit %+v, want exited by SIGKILL", p, p.Exit)
	}
}

func TestKillTerminatesWholeTree(t *testing.T) {
	h := newHarness(t)
	p := h.run("tree", "sh", "-c", `sleep 1000 & sleep 1000 & echo up; wait`)
	h.followUntil("tree", "up")
	tree, err := procfs.ScanTree()
	if err != nil {
		t.Fatal(err)
	}
	members := tree.Descendants(p.InitPID)
	if len(members) < 3 {
		t.Fatalf("tree below init %d has %v, want the shell and two sleeps", p.InitPID, members)
	}
	starts := map[int]uint64{}
	for _, pid := range members {
		starts[pid], _ = procfs.StartTime(pid)
	}
	got, err := h.client().Kill(ctxT(t), api.KillParams{Name: "tree"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Exit == nil || got.Exit.Signal != "SIGTERM" {
		t.Fatalf("exit %+v, want SIGTERM", got.Exit)
	}
	for pid, st := range starts {
		if procfs.Alive(pid, st) {
			t.Errorf("pid %d of the tree survived kill", pid)
		}
	}
}

// TestStatusAnswersDuringSlowKill holds a kill inside its grace period and
// checks that status, ps and another process's run are served meanwhile.
func TestStatusAnswersDuringSlowKill(t *testing.T) {
	h := newHarness(t)
	h.run("slow", "sh", "-c", `trap "echo got-term" TERM; echo ready; while :; do sleep 0.05; done`)
	h.followUntil("slow", "ready")
	killed := make(chan *api.Process, 1)
	go func() {
		p, err := h.client().Kill(context.Background(), api.KillParams{Name: "slow", Grace: api.Duration(time.Hour)})
		if err != nil {
			t.Error(err)
		}
		killed <- p
	}()
	h.followUntil("slow", "got-term") // the kill is now waiting out its grace
	c := h.client()
	for range 50 {
		if _, err := c.Status(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := c.Process(ctxT(t), "slow"); err != nil || p.State != api.StateRunning {
		t.Fatalf("status of slow during kill: %+v %v", p, err)
	}
	h.run("other", "true")
	select {
	case <-killed:
		t.Fatal("kill returned before the grace ended")
	default:
	}
	if _, err := c.Kill(ctxT(t), api.KillParams{Name: "slow", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	if p := <-killed; p == nil || p.Exit == nil || p.Exit.Signal != "SIGKILL" {
		t.Fatalf("kill result %+v", p)
	}
}

func TestEnvironmentIsExactlyWhatWasAsked(t *testing.T) {
	h := newHarness(t)
	p, err := h.client().Run(ctxT(t), api.RunParams{Name: "env", Cmd: []string{"/usr/bin/env"}, Dir: "/", GPU: &api.GPURef{Index: 1},
		Env: map[string]string{"FOO": "bar", "CUDA_VISIBLE_DEVICES": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitExit("env")
	lines, err := h.client().Logs(ctxT(t), "env", -1)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	want := []string{
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"CUDA_VISIBLE_DEVICES=GPU-5a1d0000-0000-4000-8000-000000000001",
		"FOO=bar",
		"GPUSCHED_ID=" + p.ID,
		"GPUSCHED_NAME=env",
		"GPUSCHED_NICE=0",
		"GPUSCHED_PRIORITY=normal",
		"GPUSCHED_SIM_DIR=" + h.cfg.SimDir,
		"GPUSCHED_SOCKET=" + h.cfg.Socket,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("environment:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestNiceIsApplied(t *testing.T) {
	h := newHarness(t)
	_, err := h.client().Run(ctxT(t), api.RunParams{Name: "nice", Cmd: []string{"sh", "-c", `cut -d" " -f19 /proc/self/stat`}, Dir: "/", Nice: 5,
		Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitExit("nice")
	if lines, _ := h.client().Logs(ctxT(t), "nice", 1); len(lines) != 1 || lines[0] != "5" {
		t.Fatalf("nice seen by the process: %q, want 5", lines)
	}
}

func TestDefaultDirIsCallersCwd(t *testing.T) {
	h := newHarness(t)
	rc := h.raw()
	rc.send(`{"method":"run","params":{"name":"cwd","cmd":["/bin/pwd"]}}`)
	if resp := rc.recv(); resp["ok"] != true {
		t.Fatal(resp)
	}
	wd, _ := os.Getwd()
	h.waitExit("cwd")
	if lines, _ := h.client().Logs(ctxT(t), "cwd", 1); len(lines) != 1 || lines[0] != wd {
		t.Fatalf("process ran in %q, want the caller's cwd %q", lines, wd)
	}
}

func TestRunReplacesExitedWithAFreshLog(t *testing.T) {
	h := newHarness(t)
	first := h.run("again", "sh", "-c", "echo first")
	h.waitExit("again")
	second := h.run("again", "sh", "-c", "echo second")
	if second.ID == first.ID {
		t.Fatal("replacement kept the old id")
	}
	h.waitExit("again")
	lines, _ := h.client().Logs(ctxT(t), "again", -1)
	if strings.Join(lines, ",") != "second" {
		t.Fatalf("log lines %q: want only the new run's", lines)
	}
	ps, _ := h.client().PS(ctxT(t), api.PSParams{})
	if len(ps) != 1 || ps[0].ID != second.ID {
		t.Fatalf("ps %+v", ps)
	}
}

func TestFollowStreamsUntilExit(t *testing.T) {
	h := newHarness(t)
	h.run("talker", "sh", "-c", `for i in 1 2 3 4 5; do echo line $i; sleep 0.02; done; printf tail`)
	var got []string
	if err := h.client().FollowLogs(ctxT(t), "talker", -1, func(l string) error { got = append(got, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "line 1,line 2,line 3,line 4,line 5,tail" {
		t.Fatalf("followed %q", got)
	}
}

func TestWaitTimesOut(t *testing.T) {
	h := newHarness(t)
	h.run("forever", "sleep", "1000")
	_, err := h.client().Wait(ctxT(t), api.WaitParams{Name: "forever", Timeout: api.Duration(50 * time.Millisecond)}, nil)
	if !api.IsTimeout(err) {
		t.Fatalf("err %v, want timeout", err)
	}
}

func TestExitCodesAndSignalsAreExact(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name, script string
		code         int
		signal       string
	}{
		{"zero", "exit 0", 0, ""},
		{"seven", "exit 7", 7, ""},
		{"segv", "kill -SEGV $$", 0, "SIGSEGV"},
		{"usr1", "kill -USR1 $$", 0, "SIGUSR1"},
	}
	for _, tt := range tests {
		h.run(tt.name, "sh", "-c", tt.script)
	}
	for _, tt := range tests {
		p := h.waitExit(tt.name)
		switch {
		case tt.signal != "" && (p.Exit.Signal != tt.signal || p.Exit.Code != nil):
			t.Errorf("%s: exit %+v, want signal %s", tt.name, p.Exit, tt.signal)
		case tt.signal == "" && (p.Exit.Code == nil || *p.Exit.Code != tt.code):
			t.Errorf("%s: exit %+v, want code %d", tt.name, p.Exit, tt.code)
		}
	}
}

func TestConcurrentRunsAndKills(t *testing.T) {
	h := newHarness(t)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.client()
			name := fmt.Sprint("c", i)
			if _, err := c.Run(ctxT(t), api.RunParams{Name: name, Cmd: []string{"sleep", "1000"}, Dir: "/", Env: map[string]string{"PATH": "/bin:/usr/bin"}}); err != nil {
				t.Error(err)
				return
			}
			if _, err := c.Status(ctxT(t)); err != nil {
				t.Error(err)
			}
			if _, err := c.Kill(ctxT(t), api.KillParams{Name: name}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ps, _ := h.client().PS(ctxT(t), api.PSParams{})
	if len(ps) != n {
		t.Fatalf("%d processes listed, want %d", len(ps), n)
	}
	for _, p := range ps {
		if p.State != api.StateExited {
			t.Errorf("%s is %s", p.Name, p.State)
		}
	}
}
