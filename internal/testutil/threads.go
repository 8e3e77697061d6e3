package testutil

import (
	"os/exec"
	"runtime"
	"sync"
	"testing"
)

// HoldThreads keeps n goroutines on threads of their own until t ends.
func HoldThreads(t testing.TB, n int) {
	var started sync.WaitGroup
	done := make(chan struct{})
	for range n {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started.Done()
			<-done
		}()
	}
	started.Wait()
	t.Cleanup(func() { close(done) })
}

// Sleeper starts a process that sleeps until t ends, when it is killed,
// and returns its pid.
func Sleeper(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}
