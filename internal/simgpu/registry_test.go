package simgpu

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestDeviceUUID(t *testing.T) {
	if got, want := DeviceUUID(3), "GPU-5a1d0000-0000-4000-8000-000000000003"; got != want {
		t.Errorf("DeviceUUID(3) = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for i := range 1000 {
		u := DeviceUUID(i)
		if seen[u] || u != DeviceUUID(i) {
			t.Fatalf("DeviceUUID(%d) = %q not unique or not stable", i, u)
		}
		seen[u] = true
	}
}

func TestCreateModesDespiteUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "sim")
	if _, err := Create(dir, []Device{{Index: 0, UUID: DeviceUUID(0), Name: DefaultName, TotalMiB: 1024}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{
		"":        fs.ModeDir | 0o755,
		procsName: fs.ModeDir | 0o755,
		locksName: fs.ModeDir | 0o755,
		gpusName:  0o644,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Join(dir, name), fi.Mode(), want)
		}
	}
}

func TestCreateOpenRoundTrip(t *testing.T) {
	dir := t.TempDir()
	devs := []Device{
		{Index: 1, UUID: DeviceUUID(1), Name: DefaultName, TotalMiB: 2048},
		{Index: 0, UUID: DeviceUUID(0), Name: DefaultName, TotalMiB: 1024},
	}
	if _, err := Create(dir, devs); err != nil {
		t.Fatal(err)
	}
	reg, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := reg.Devices()
	if len(got) != 2 || got[0] != devs[1] || got[1] != devs[0] {
		t.Errorf("Devices() = %+v, want sorted %+v", got, devs)
	}
	// Re-creating keeps live records (jobs outlive a daemon restart).
	pid, st := self(t)
	if err := reg.Allocate(pid, st, DeviceUUID(0), 100); err != nil {
		t.Fatal(err)
	}
	reg2, err := Create(dir, devs)
	if err != nil {
		t.Fatal(err)
	}
	if got := usedOn(snapshot(t, reg2), DeviceUUID(0)); got != 100 {
		t.Errorf("used after re-Create = %d, want 100", got)
	}
}

func TestCreateRejectsBadDevices(t *testing.T) {
	for name, devs := range map[string][]Device{
		"none":      nil,
		"no uuid":   {{Index: 0, TotalMiB: 1}},
		"zero size": {{Index: 0, UUID: "GPU-a"}},
		"dup uuid":  {{Index: 0, UUID: "GPU-a", TotalMiB: 1}, {Index: 1, UUID: "GPU-a", TotalMiB: 1}},
		"dup index": {{Index: 0, UUID: "GPU-a", TotalMiB: 1}, {Index: 0, UUID: "GPU-b", TotalMiB: 1}},
	} {
		if _, err := Create(t.TempDir(), devs); err == nil {
			t.Errorf("%s: Create succeeded", name)
		}
	}
}

func TestOpenMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nosim")
	_, err := Open(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing dir: %v, want ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "--sim") {
		t.Errorf("error %q should name the dir and --sim", err)
	}
}

func TestVisible(t *testing.T) {
	reg := newTestRegistry(t, 3, 1024)
	for _, tc := range []struct {
		in   string
		want []int
		err  error
	}{
		{"", nil, nil},
		{"2", []int{2}, nil},
		{DeviceUUID(1) + "," + DeviceUUID(0), []int{1, 0}, nil},
		{"0, " + DeviceUUID(2), []int{0, 2}, nil},
		{"3", nil, ErrNoSuchDevice},
		{"GPU-nope", nil, ErrNoSuchDevice},
		{"1," + DeviceUUID(1), nil, errors.New("listed twice")},
	} {
		devs, err := reg.Visible(tc.in)
		if tc.err != nil {
			if err == nil || (errors.Is(tc.err, ErrNoSuchDevice) && !errors.Is(err, ErrNoSuchDevice)) {
				t.Errorf("Visible(%q) error = %v, want %v", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Visible(%q): %v", tc.in, err)
			continue
		}
		var idx []int
		for _, d := range devs {
			idx = append(idx, d.Index)
		}
		if len(idx) != len(tc.want) || (len(idx) > 0 && !equalInts(idx, tc.want)) {
			t.Errorf("Visible(%q) = %v, want %v", tc.in, idx, tc.want)
		}
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestBetweenCallsExcludesCalls: while BetweenCalls runs its function, no
// simulated driver call can hold the directory lock, so a process stopped
// then is outside every call; afterwards calls go on.
func TestBetweenCallsExcludesCalls(t *testing.T) {
	reg, err := Create(t.TempDir(), Devices(1, 1024))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := reg.BetweenCalls(0, func() {
		ran = true
		if reg.tryLockedUser(0, func() {}) {
			t.Error("a driver call took the lock during BetweenCalls")
		}
	}); err != nil || !ran {
		t.Fatalf("BetweenCalls: ran %v, %v", ran, err)
	}
	if !reg.tryLockedUser(0, func() {}) {
		t.Fatal("the lock is still held after BetweenCalls")
	}
}
