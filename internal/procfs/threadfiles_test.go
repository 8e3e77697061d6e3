package procfs

import (
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestThreadFiles: of the files a process holds in /proc, only those of a
// thread other than its main one are listed, in the form CRIU meets them.
func TestThreadFiles(t *testing.T) {
	pid := os.Getpid()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, e := range tasks {
		if e.Name() != strconv.Itoa(pid) {
			other = e.Name()
		}
	}
	if other == "" {
		t.Fatal("a Go test process has more than one thread")
	}
	self := "/proc/" + strconv.Itoa(pid)
	for _, p := range []string{self + "/task/" + other + "/comm", self + "/task/" + strconv.Itoa(pid) + "/comm", self + "/stat"} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	got, err := ThreadFiles(pid, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{self + "/task/" + other + "/comm"}; !slices.Equal(got, want) {
		t.Fatalf("ThreadFiles = %q, want %q", got, want)
	}
	if got, err := ThreadFiles(1<<30, 3); got != nil || err != nil {
		t.Fatalf("a gone pid: %q, %v", got, err)
	}
}

func TestIsThreadFile(t *testing.T) {
	for path, want := range map[string]bool{
		"/proc/9/task/15/comm": true,
		"/proc/9/task/15":      true,
		"/proc/9/task/9/comm":  false,
		"/proc/9/comm":         false,
		"/proc/self/task/15":   false, // a link, never what readlink of a fd shows
		"/proc/9/task/x/comm":  false,
		"/tmp/proc/9/task/15":  false,
		"/proc/9/task":         false,
	} {
		if got := isThreadFile(path); got != want {
			t.Errorf("isThreadFile(%q) = %v, want %v", path, got, want)
		}
	}
}
