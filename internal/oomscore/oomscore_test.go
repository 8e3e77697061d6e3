package oomscore

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// TestSetAndOf: a value raised is read back; one below the floor, from a
// process without CAP_SYS_RESOURCE, is ErrBelowFloor and changes nothing;
// values outside the kernel's range are refused before any write.
func TestSetAndOf(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	base, err := Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := Set(pid, base+300); err != nil {
		t.Fatal(err)
	}
	if v, err := Of(pid); err != nil || v != base+300 {
		t.Fatalf("Of after Set(%d) = %d, %v", base+300, v, err)
	}
	for _, v := range []int{Min - 1, Max + 1} {
		if err := Set(pid, v); err == nil || errors.Is(err, ErrBelowFloor) {
			t.Errorf("Set(%d) = %v; want it refused as out of range", v, err)
		}
	}
	if v, _ := Of(pid); v != base+300 {
		t.Fatalf("after refused values: %d, want %d", v, base+300)
	}
	if hasSysResource(t) {
		t.Skip("this process holds CAP_SYS_RESOURCE: it has no floor")
	}
	// Lowering back to where it started is allowed (at or above the floor
	// it took from this process); to Min, which exempts it, is not.
	if err := Set(pid, base); err != nil {
		t.Fatalf("Set back to %d: %v", base, err)
	}
	if base == Min {
		t.Skip("this process is exempt from the OOM killer: its children have no floor above Min")
	}
	if err := Set(pid, Min); !errors.Is(err, ErrBelowFloor) {
		t.Fatalf("Set(%d) = %v; want ErrBelowFloor", Min, err)
	}
	if v, _ := Of(pid); v != base {
		t.Fatalf("after a refused write: %d, want %d", v, base)
	}
}

func TestOfGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Of(cmd.Process.Pid); err == nil {
		t.Fatal("Of of a reaped process: no error")
	}
}

// hasSysResource reports whether this process's effective set holds
// CAP_SYS_RESOURCE.
func hasSysResource(t *testing.T) bool {
	b, err := procfs.ReadFile("/proc/self/status", procfs.MaxStatus)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return eff&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff line")
	return false
}
