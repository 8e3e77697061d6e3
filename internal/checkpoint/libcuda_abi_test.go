package checkpoint

import (
	"testing"
	"time"
	"unsafe"
)

func TestCUDAStructLayout(t *testing.T) {
	var lock cuLockArgs
	var restore cuRestoreArgs
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUcheckpointLockArgs)", unsafe.Sizeof(lock), 64},
		{"sizeof(CUcheckpointCheckpointArgs)", unsafe.Sizeof(cuCheckpointArgs{}), 64},
		{"sizeof(CUcheckpointRestoreArgs)", unsafe.Sizeof(restore), 64},
		{"sizeof(CUcheckpointUnlockArgs)", unsafe.Sizeof(cuUnlockArgs{}), 64},
		{"sizeof(CUcheckpointGpuPair)", unsafe.Sizeof(cuGPUPair{}), 32},
		{"sizeof(CUuuid)", unsafe.Sizeof(cuUUID{}), 16},
		{"lock.timeoutMs", unsafe.Offsetof(lock.timeoutMs), 0},
		{"lock.reserved0", unsafe.Offsetof(lock.reserved0), 4},
		{"lock.reserved1", unsafe.Offsetof(lock.reserved1), 8},
		{"restore.gpuPairs", unsafe.Offsetof(restore.gpuPairs), 0},
		{"restore.gpuPairsCount", unsafe.Offsetof(restore.gpuPairsCount), 8},
		{"restore.reserved", unsafe.Offsetof(restore.reserved), 12},
		{"restore.reserved1", unsafe.Offsetof(restore.reserved1), 56},
		{"pair.newUuid", unsafe.Offsetof(cuGPUPair{}.newUUID), 16},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestGPUUUID(t *testing.T) {
	const s = "GPU-5a1d0000-0000-4000-8000-000000000003"
	u, err := parseGPUUUID(s)
	if err != nil {
		t.Fatal(err)
	}
	if u[0] != 0x5a || u[1] != 0x1d || u[15] != 0x03 {
		t.Errorf("parse %s = %x", s, u)
	}
	if u.String() != s {
		t.Errorf("String() = %s, want %s", u, s)
	}
	for _, bad := range []string{"", "GPU-", "GPU-5a1d0000-0000-4000-8000-00000000000", "GPU-5a1d0000-0000-4000-8000-00000000000g"} {
		if _, err := parseGPUUUID(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	if _, err := cuPairs([]GPUPair{{Old: s, New: "nope"}}); err == nil {
		t.Error("cuPairs with a bad uuid: no error")
	}
}

func TestCUDAVersion(t *testing.T) {
	for v, want := range map[int32]string{12080: "12.8", 12090: "12.9", 13000: "13.0", 12010: "12.1"} {
		if got := cudaVersion(v); got != want {
			t.Errorf("cudaVersion(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestLockTimeoutMs(t *testing.T) {
	for d, want := range map[time.Duration]uint32{
		0: 0, -time.Second: 0, time.Microsecond: 1, 1500 * time.Microsecond: 2, 10 * time.Second: 10000,
		1 << 62: 1<<32 - 1,
	} {
		if got := lockTimeoutMs(d); got != want {
			t.Errorf("lockTimeoutMs(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	b := newTailBuffer(8)
	b.Write([]byte("hello "))
	if got := b.String(); got != "hello" {
		t.Errorf("tail = %q", got)
	}
	b.Write([]byte("world\n"))
	if got := b.String(); got != "...o world" {
		t.Errorf("tail = %q", got)
	}
}
