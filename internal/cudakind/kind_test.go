package cudakind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	const (
		anon  = "7f3182a92000-7f3182aa2000 rw-p 00000000 00:00 0 \n"
		heap  = "55e53c90d000-55e53c90e000 rw-p 00000000 00:00 0                          [heap]\n"
		ctl   = "7f3182a92000-7f3182aa2000 rw-s 00000000 00:05 1039                       /dev/nvidiactl\n"
		dev3  = "7f3182a92000-7f3182aa2000 -w-s 00000000 00:06 11385090                   /dev/nvidia3\n"
		nccl  = "7f3f03dbc000-7f3f03dbd000 r-xp 000e1000 00:20 54227                      /venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
		shm   = "7f3f03dbc000-7f3f03dbd000 rw-s 00000000 00:1a 991                        /dev/shm/nccl-AbC123 (deleted)\n"
		uvm   = "200000000-200200000 rw-s 200000000 00:05 478                           /dev/nvidia-uvm\n"
		tools = "7f3182a92000-7f3182aa2000 rw-s 00000000 00:05 479                        /dev/nvidia-uvm-tools\n"
		space = "7f3182a92000-7f3182aa2000 r--p 00000000 00:20 1                          /tmp/a dir/libnccl.so.2 (deleted)\n"
		plain = "7f3182a92000-7f3182aa2000 r--p 00000000 00:20 1                          /usr/lib/libncurses.so.6\n"
	)
	for _, c := range []struct {
		name, maps string
		want       Kind
	}{
		{"a CUDA process", anon + heap + ctl + dev3, Kind{}},
		{"NCCL loaded", heap + nccl + ctl, Kind{NCCL: true}},
		{"NCCL ranks sharing memory", nccl + shm, Kind{NCCL: true, NCCLShared: true}},
		{"managed memory", ctl + uvm, Kind{UVM: true}},
		{"UVM tools only", ctl + tools, Kind{}},
		{"a path with a space, unlinked", space, Kind{NCCL: true}},
		{"a library that is not NCCL", plain, Kind{}},
		{"empty", "", Kind{}},
	} {
		got, err := Parse(strings.NewReader(c.maps))
		if err != nil || got != c.want {
			t.Errorf("%s: Parse = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if _, err := Parse(strings.NewReader(strings.Repeat("x", maxLine+1))); err == nil {
		t.Error("Parse took a line over the limit")
	}
}

func TestUnsupported(t *testing.T) {
	for _, k := range []Kind{{NCCL: true}, {UVM: true}} {
		if why := k.Unsupported(); why != nil {
			t.Errorf("%+v is unsupported: %q", k, why)
		}
	}
	why := (Kind{NCCLShared: true, UVM: true}).Unsupported()
	if len(why) != 1 || !strings.Contains(why[0], "NVIDIA/cuda-checkpoint#30") {
		t.Errorf("Unsupported = %q", why)
	}
}

// mapFile maps a page of a new file at path into this process until the
// test ends.
func mapFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, unix.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, unix.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
}

// TestInspect reads this very process's map once it maps files named like
// NVIDIA's UVM device and the NCCL library.
func TestInspect(t *testing.T) {
	self := os.Getpid()
	if k, err := Inspect(self); err != nil || k != (Kind{}) {
		t.Fatalf("Inspect before mapping = %+v, %v", k, err)
	}
	dir := t.TempDir()
	mapFile(t, filepath.Join(dir, "nvidia-uvm"))
	nccl := filepath.Join(dir, "libnccl.so.2")
	mapFile(t, nccl)
	if err := os.Remove(nccl); err != nil { // shows as "(deleted)"
		t.Fatal(err)
	}
	if k, err := Inspect(self); err != nil || k != (Kind{NCCL: true, UVM: true}) {
		t.Errorf("Inspect = %+v, %v; want NCCL and UVM", k, err)
	}
	if _, err := Inspect(-1); err == nil {
		t.Error("Inspect(-1) succeeded")
	}
}
