package schedwait

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountMountsTracefsWhereAbsent mounts tracefs on an empty directory,
// and only once.
func TestMountMountsTracefsWhereAbsent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root := t.TempDir()
	if err := Mount(root); err != nil {
		t.Skip(err) // a kernel without tracefs
	}
	t.Cleanup(func() { unix.Unmount(root, 0) })
	if _, err := os.Stat(filepath.Join(root, "instances")); err != nil {
		t.Fatalf("no tracefs on %s after Mount: %v", root, err)
	}
	if err := Mount(root); err != nil {
		t.Fatalf("Mount where mounted: %v", err)
	}
	if err := unix.Unmount(root, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(root, 0); err == nil {
		t.Error("Mount where mounted mounted it again")
	}
}

// TestRecordingSeesAChildsWakeups records the kernel while children sleep
// and wake: their wake-ups are waits of their threads, and the instance is
// gone after Stop.
func TestRecordingSeesAChildsWakeups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tracefs needs root")
	}
	if _, err := os.Stat(Tracefs + "/instances"); err != nil {
		t.Skipf("no tracefs: %v", err)
	}
	r, err := Start(Tracefs, 1024)
	if err != nil {
		t.Fatal(err)
	}
	children := map[int]bool{}
	for range 5 {
		c := exec.Command("sleep", "0.01")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		children[c.Process.Pid] = true
	}
	tr, err := r.Stop(func(comm string) bool { return comm == "sleep" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("the instance outlived Stop: %v", err)
	}
	woken := map[int]bool{}
	for _, w := range tr.Waits {
		if children[tr.Tgid[w.Tid]] && w.Woken && w.To >= w.From {
			woken[tr.Tgid[w.Tid]] = true
		}
	}
	if len(woken) != len(children) {
		t.Fatalf("wake-ups of %v among %d waits, want one of each of %v", woken, len(tr.Waits), children)
	}
	if tr.Lost != 0 || tr.CPUs == 0 {
		t.Errorf("lost %d events, %d CPUs", tr.Lost, tr.CPUs)
	}
}
