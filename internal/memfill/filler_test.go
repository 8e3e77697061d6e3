package memfill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
)

// target95 is 0.95 of the simulated GPU, and free95 what it leaves free.
const (
	target95 = simGPUMiB * 95 / 100
	free95   = simGPUMiB - target95
	chunk    = DefaultChunkMiB
)

// settled reports whether the device's usage is within one chunk below
// target.
func settled(used, target uint64) bool { return used <= target && used+chunk > target }

func TestFillerHoldsTargetAroundOtherProcesses(t *testing.T) {
	r := newRig(t, "")
	f := r.start(t)
	if st := f.State(); st.HeldMiB != 0 || st.TotalMiB != simGPUMiB || f.ChunkMiB() != chunk {
		t.Fatalf("hello: state %+v, chunk %d", st, f.ChunkMiB())
	}
	if !procfs.Alive(f.PID(), f.StartTime()) {
		t.Fatalf("hello names pid %d start %d: not that process", f.PID(), f.StartTime())
	}

	st, err := f.Set(ctx(t), target95, 0)
	if err != nil {
		t.Fatal(err)
	}
	used, held := r.usage(t, f.PID())
	if !settled(used, target95) || held != st.HeldMiB || st.FreeMiB != simGPUMiB-used {
		t.Fatalf("after set target %d: used %d, filler %d in the registry; reply %+v", target95, used, held, st)
	}

	// Another process allocates 4 GiB, 512 MiB at a time (what the filler
	// leaves free): the filler gives way after each, holding the total.
	other := startOther(t)
	for i := 1; i <= 8; i++ {
		before := f.State()
		if err := r.reg.Allocate(other.pid, other.start, r.uuid, 512); err != nil {
			t.Fatalf("other process, allocation %d: %v", i, err)
		}
		st := r.watch.await(t, "the filler gave way", func(st State) bool {
			return st.HeldMiB < before.HeldMiB && st.FreeMiB >= free95
		})
		used, held := r.usage(t, f.PID())
		if !settled(used, target95) || held != st.HeldMiB {
			t.Fatalf("other holds %d MiB: used %d, filler %d (reported %+v)", 512*i, used, held, st)
		}
	}
	if _, held := r.usage(t, f.PID()); held > target95-4096 {
		t.Fatalf("filler holds %d MiB beside 4 GiB of others", held)
	}

	// It frees them: the filler grows back.
	low := f.State().HeldMiB
	if err := r.reg.Release(other.pid); err != nil {
		t.Fatal(err)
	}
	r.watch.await(t, "the filler grew back", func(st State) bool {
		return st.HeldMiB >= low+4096-chunk && st.FreeMiB < free95+chunk
	})
	if used, _ := r.usage(t, f.PID()); !settled(used, target95) {
		t.Fatalf("after the other process freed: used %d", used)
	}

	// A raised reserve is free when Set returns.
	st, err = f.Set(ctx(t), target95, 8192)
	if err != nil {
		t.Fatal(err)
	}
	used, _ = r.usage(t, f.PID())
	if free := simGPUMiB - used; free < free95+8192 || st.FreeMiB < free95+8192 || st.ReserveMiB != 8192 {
		t.Fatalf("after reserve 8192: %d MiB free in the registry, reply %+v; want >= %d", free, st, free95+8192)
	}

	// Release: the helper has freed everything and is gone.
	pid, start := f.PID(), f.StartTime()
	if err := f.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if used, held := r.usage(t, pid); used != 0 || held != 0 || r.hasRecord(pid) {
		t.Fatalf("after release: used %d, helper %d, record %v", used, held, r.hasRecord(pid))
	}
	if procfs.Alive(pid, start) {
		t.Fatalf("helper %d still running after release", pid)
	}
	if _, err := os.Stat(r.opts.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	select {
	case <-f.Done():
	default:
		t.Fatal("Done open after release")
	}
	if f.Err() != nil {
		t.Fatalf("Err after release: %v", f.Err())
	}
	if _, err := f.Set(ctx(t), 0, 0); !errors.Is(err, ErrGone) {
		t.Fatalf("set after release: %v, want ErrGone", err)
	}
}

func TestAdopt(t *testing.T) {
	r := newRig(t, "")
	f1 := r.start(t)
	if _, err := f1.Set(ctx(t), 12288, 0); err != nil {
		t.Fatal(err)
	}
	_, held := r.usage(t, f1.PID())

	// The daemon goes: the helper holds on.
	if err := f1.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, now := r.usage(t, f1.PID()); now != held || held == 0 {
		t.Fatalf("after detach the helper holds %d MiB, had %d", now, held)
	}

	// The next daemon adopts it.
	f2, err := Adopt(ctx(t), r.opts)
	if err != nil {
		t.Fatal(err)
	}
	if f2.PID() != f1.PID() || f2.StartTime() != f1.StartTime() || f2.State().HeldMiB != held || f2.State().TargetMiB != 12288 {
		t.Fatalf("adopted pid %d start %d state %+v; spawned pid %d start %d holding %d",
			f2.PID(), f2.StartTime(), f2.State(), f1.PID(), f1.StartTime(), held)
	}
	st, err := f2.Set(ctx(t), 6144, 0)
	if err != nil {
		t.Fatal(err)
	}
	if used, now := r.usage(t, f2.PID()); !settled(used, 6144) || now != st.HeldMiB {
		t.Fatalf("adopted set target 6144: used %d, helper %d, reply %+v", used, now, st)
	}

	// A newer controller supersedes it.
	f3, err := Adopt(ctx(t), r.opts)
	if err != nil {
		t.Fatal(err)
	}
	<-f2.Done()
	if err := f2.Err(); !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "superseded") {
		t.Fatalf("superseded controller: Err %v", err)
	}
	if _, err := f2.Status(ctx(t)); !errors.Is(err, ErrGone) {
		t.Fatalf("superseded controller: Status %v", err)
	}
	if st, err := f3.Status(ctx(t)); err != nil || st.HeldMiB != held/2 {
		t.Fatalf("status: %+v, %v", st, err)
	}

	// Releasing through the adopted connection ends the helper.
	if err := f3.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if procfs.Alive(f3.PID(), f3.StartTime()) || r.hasRecord(f3.PID()) {
		t.Fatalf("helper %d alive or recorded after release", f3.PID())
	}
	<-f1.exited // the spawning Filler reaps it
	if f1.waitErr != nil {
		t.Fatalf("helper exit: %v", f1.waitErr)
	}
}

func TestOrphanTimeout(t *testing.T) {
	r := newRig(t, "")
	r.opts.Orphan = 300 * time.Millisecond
	f := r.start(t)
	if _, err := f.Set(ctx(t), 12288, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Detach(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.exited:
	case <-ctx(t).Done():
		t.Fatal("orphaned helper still running")
	}
	if f.waitErr != nil || r.hasRecord(f.PID()) {
		t.Fatalf("orphaned helper: exit %v, record left %v", f.waitErr, r.hasRecord(f.PID()))
	}
	if _, err := os.Stat(r.opts.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if _, err := Adopt(ctx(t), r.opts); !errors.Is(err, ErrGone) {
		t.Fatalf("adopt after exit: %v, want ErrGone", err)
	}
	log, err := os.ReadFile(r.opts.LogPath)
	if err != nil || !strings.Contains(string(log), "no controller for 300ms") {
		t.Fatalf("log (%v):\n%s", err, log)
	}
}

func TestSignals(t *testing.T) {
	r := newRig(t, "")
	f := r.start(t)
	if _, err := f.Set(ctx(t), 12288, 0); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(f.PID(), sig); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := f.Status(ctx(t)); err != nil || st.HeldMiB == 0 {
		t.Fatalf("after SIGINT and SIGHUP: %+v, %v", st, err)
	}
	if err := syscall.Kill(f.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-f.Done()
	<-f.exited
	if f.waitErr != nil || r.hasRecord(f.PID()) {
		t.Fatalf("after SIGTERM: exit %v, record left %v", f.waitErr, r.hasRecord(f.PID()))
	}
	if err := f.Err(); !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "SIGTERM") {
		t.Fatalf("Err after SIGTERM: %v (want the helper's log quoted)", err)
	}
}

func TestStartFailures(t *testing.T) {
	r := newRig(t, "")
	o := r.opts
	o.Backend, o.Library = "cuda", "/nonexistent/libcuda.so.1"
	if _, err := Start(ctx(t), o); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "no NVIDIA driver library") {
		t.Fatalf("cuda without a driver: %v, want ErrUnsupported", err)
	}
	// A helper that dies without a word: the error quotes its stderr.
	o = r.opts
	o.Path = "/bin/sh"
	if _, err := Start(ctx(t), o); err == nil || !strings.Contains(err.Error(), "(exit status 2); log: ") || !strings.Contains(err.Error(), "log: gpusched-filler") {
		t.Fatalf("a helper dying at start: %v, want its exit status and stderr", err)
	}
	o = r.opts
	o.SimDir = ""
	if _, err := Start(ctx(t), o); err == nil || !strings.Contains(err.Error(), "--sim-dir") {
		t.Fatalf("sim without a sim dir: %v", err)
	}
	o = r.opts
	o.UUID = "GPU-nonexistent"
	if _, err := Start(ctx(t), o); err == nil || !strings.Contains(err.Error(), "GPU-nonexistent") {
		t.Fatalf("unknown GPU: %v", err)
	}
	o = r.opts
	o.Path = "/nonexistent/gpuschedd"
	if _, err := Start(ctx(t), o); err == nil {
		t.Fatal("start of a missing binary succeeded")
	}
	if _, err := Adopt(ctx(t), r.opts); !errors.Is(err, ErrGone) {
		t.Fatalf("adopt without a helper: %v, want ErrGone", err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(canceled, r.opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("start under a canceled context: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	r := newRig(t, "")
	f := r.start(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Go(func() {
			st, err := f.Set(ctx(t), 12288, uint64(i%4)*1024)
			if err == nil && st.TargetMiB != 12288 {
				err = fmt.Errorf("set %d answered with %+v", i, st)
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := f.Status(ctx(t))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := f.Set(ctx(t), 12288, 0)
	if used, _ := r.usage(t, f.PID()); err != nil || !settled(used, 12288) {
		t.Fatalf("after concurrent calls: used %d, %+v, %v", used, st, err)
	}
}

// TestHelperOnTheUsersCPUs: under --daemon-cpus a filler's helper, which
// holds memory for users' work, is born on the CPUs the daemon gives
// users; this process's threads stay on its own.
func TestHelperOnTheUsersCPUs(t *testing.T) {
	daemonCPUs, userCPUs := testutil.ConfineSelf(t)
	f := newRig(t, "").start(t)
	testutil.WantThreadsOn(t, "the filler's helper", f.PID(), userCPUs)
	testutil.WantThreadsOn(t, "this process", os.Getpid(), daemonCPUs)
}
