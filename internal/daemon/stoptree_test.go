package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// v1Freezer is cgroup v1's freezer, which holds threads one by one.
const v1Freezer = "/sys/fs/cgroup/freezer"

// TestStopTreeWaitsForEveryThread: a freeze's stop returns only once
// every thread of the tree has stopped, not only each process's first
// one. A thread woken by SIGSTOP from a wait takes what came meanwhile
// before it stops (a pipe's bytes, a lock); the test holds a second
// thread in the freezer past its process's first thread's stop.
func TestStopTreeWaitsForEveryThread(t *testing.T) {
	if _, err := os.Stat(filepath.Join(v1Freezer, "tasks")); err != nil {
		t.Skip("needs cgroup v1's freezer, which holds one thread of a process")
	}
	// Root's process: the stop is the same for every user's.
	_, out := testutil.PythonAs(t, testutil.User{}, `import os, threading, time
def second():
    print(os.getpid(), threading.get_native_id(), flush=True)
    time.sleep(3600)
threading.Thread(target=second, daemon=True).start()
time.sleep(3600)`)
	var pid, tid int
	if !out.Scan() {
		t.Fatalf("the process printed nothing: %v", out.Err())
	}
	if _, err := fmt.Sscan(out.Text(), &pid, &tid); err != nil {
		t.Fatalf("%q: %v", out.Text(), err)
	}

	thaw := freezeThread(t, tid)
	stopped := make(chan error, 1)
	go func() {
		_, err := sigstopTree(pid, time.Minute)
		stopped <- err
	}()
	waitFor(t, func() bool {
		st, err := procfs.ReadStat(pid)
		return err == nil && st.State == 'T'
	})
	select {
	case err := <-stopped:
		t.Fatalf("the stop returned (%v) while thread %d of pid %d could not stop yet", err, tid, pid)
	case <-time.After(100 * time.Millisecond): // the stop, waiting, does not return: a bounded look
	}
	thaw()
	if err := <-stopped; err != nil {
		t.Fatalf("the stop, once the thread could: %v", err)
	}
	if !allThreadsStopped(t, pid) {
		t.Fatalf("the stop returned with a thread of pid %d not stopped", pid)
	}
}

// TestFailedStopLeavesNothingStopped: a hibernate or fork of a tree frozen
// without its stop stops the tree first; where that stop fails (a thread
// held past its second, here by the freezer), the processes it had
// stopped are continued: nothing records them stopped, so nothing would
// continue them, and a thaw would refuse them as stopped by someone else.
func TestFailedStopLeavesNothingStopped(t *testing.T) {
	if _, err := os.Stat(filepath.Join(v1Freezer, "tasks")); err != nil {
		t.Skip("needs cgroup v1's freezer, which holds one thread of a process")
	}
	for _, op := range []string{"hibernate", "fork"} {
		t.Run(op, func(t *testing.T) {
			h := newDiskHarness(t, config.DriverSim)
			c := h.client()
			h.memJob("a", 256, 16)
			noStop := false
			if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "a", Stop: &noStop}); err != nil {
				t.Fatal(err)
			}
			pid := h.proc("a").PID
			tasks, err := os.ReadDir(procfs.Path(pid, "/task"))
			if err != nil || len(tasks) < 2 {
				t.Fatalf("threads of pid %d: %d (%v), want a second", pid, len(tasks), err)
			}
			tid, _ := strconv.Atoi(tasks[len(tasks)-1].Name())
			thaw := freezeThread(t, tid)
			switch op {
			case "hibernate":
				_, err = c.Hibernate(ctxT(t), api.HibernateParams{Name: "a"})
			case "fork":
				_, err = c.Fork(ctxT(t), api.ForkParams{Name: "a", Copies: 1})
			}
			if err == nil || !strings.Contains(err.Error(), "has not stopped") {
				t.Fatalf("%s with a thread held from its stop: %v, want the stop's failure", op, err)
			}
			thaw()
			tree, err := procfs.TreeOf(h.proc("a").InitPID)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tree {
				if st, err := procfs.ReadStat(p); err == nil && st.State == 'T' {
					t.Fatalf("after the failed %s, pid %d of the tree is left stopped", op, p)
				}
			}
			if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
				t.Fatalf("thaw after the failed %s: %v", op, err)
			}
		})
	}
}

// allThreadsStopped reports whether every thread of pid is stopped (T).
// Until then SIGSTOP is only pending: a thread woken by it from a read of
// its pipe still takes what arrived meanwhile before it stops (pipe_read
// looks for data before signals), as a filler's helper did in CI on a
// loaded machine.
func allThreadsStopped(t *testing.T, pid int) bool {
	t.Helper()
	tasks, err := os.ReadDir(procfs.Path(pid, "/task"))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(tid); err != nil || st.State != 'T' {
			return false
		}
	}
	return true
}

// freezeThread holds thread tid in a v1 freezer cgroup of its own until
// thaw (or the end of t).
func freezeThread(t *testing.T, tid int) (thaw func()) {
	t.Helper()
	dir := filepath.Join(v1Freezer, "gpusched-test-"+strconv.Itoa(tid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	set := func(state string) {
		if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() {
		set("THAWED")
		os.WriteFile(filepath.Join(v1Freezer, "tasks"), []byte(strconv.Itoa(tid)), 0)
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(tid)), 0); err != nil {
		t.Fatal(err)
	}
	set("FROZEN")
	waitFor(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
	})
	return func() { set("THAWED") }
}
