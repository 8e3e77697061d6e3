package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/simgpu"
)

func TestSimCaps(t *testing.T) {
	s, err := NewSim(newSimGPUs(t, 1, 1024).Dir(), SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Caps{Kind: "sim", DeviceMap: true, RestoreTID: true}); s.Caps() != want {
		t.Errorf("Caps = %+v, want %+v", s.Caps(), want)
	}
}

func TestNewSimMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nosim")
	if _, err := NewSim(dir, SimOptions{}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Errorf("NewSim(%s): %v, want ErrNotExist naming it", dir, err)
	}
}

// TestSimTransferTime checks that the per-GiB delays are slept: 1000 MiB at
// 100ms per GiB takes at least 97ms each way.
func TestSimTransferTime(t *testing.T) {
	reg := newSimGPUs(t, 1, 4096)
	s, err := NewSim(reg.Dir(), SimOptions{CheckpointPerGiB: 100 * time.Millisecond, RestorePerGiB: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pid := startSimJob(t, reg, 0, 1000)
	ctx := context.Background()
	if err := s.Lock(ctx, pid, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { return s.Checkpoint(ctx, pid) },
		func() error { return s.Restore(ctx, pid, nil) },
	} {
		start := time.Now()
		if err := op(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 97*time.Millisecond {
			t.Errorf("moving 1000 MiB took %v, want at least 97ms", took)
		}
	}
	checkState(t, s, pid, StateLocked)
}

func TestSimDoneContext(t *testing.T) {
	reg := newSimGPUs(t, 1, 4096)
	s, err := NewSim(reg.Dir(), SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := startSimJob(t, reg, 0, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	checkOpErr(t, s.Lock(ctx, pid, time.Second), ErrTimeout, "lock")
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	err = s.Lock(cctx, pid, time.Second)
	checkOpErr(t, err, ErrFailed, "lock")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not match context.Canceled", err)
	}
	checkState(t, s, pid, StateRunning)
}

func TestSimErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		in   error
		want error
	}{
		{simgpu.ErrNoCUDA, ErrNotCUDA},
		{simgpu.ErrNoSuchProcess, ErrNotCUDA},
		{simgpu.ErrIllegalState, ErrIllegalState},
		{&simgpu.OutOfMemoryError{}, ErrOutOfMemory},
		{simgpu.ErrNoSuchDevice, ErrFailed},
	} {
		err := simError("restore", 7, tc.in)
		var e *OpError
		if !errors.As(err, &e) || !errors.Is(err, tc.want) || e.PID != 7 || e.Detail != tc.in.Error() {
			t.Errorf("simError(%v) = %v, want an OpError of %v", tc.in, err, tc.want)
		}
	}
	if simError("lock", 1, nil) != nil {
		t.Error("simError(nil) is not nil")
	}
}
