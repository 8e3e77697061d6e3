package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
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
