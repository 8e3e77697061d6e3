package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// The fill tests run on one simulated 24 GiB GPU, where 0.95 is 23347 MiB.
const (
	fillGPU    = "1x24G"
	fillChunk  = 256
	fillTarget = 23347
)

// waitSettled waits until GPU gpu's total usage, read from the registry, is
// within one chunk below target.
func (h *ckptHarness) waitSettled(gpu int, target uint64) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		u := h.used(gpu)
		if u <= target && u+fillChunk > target {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("GPU %d holds %d MiB; want within %d MiB below %d", gpu, u, fillChunk, target)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// filler returns the daemon's filler on GPU index, failing t without one.
func (h *ckptHarness) filler(index int) api.Filler {
	h.t.Helper()
	fs, err := h.client().Fillers(ctxT(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range fs {
		if f.Index == index {
			return f
		}
	}
	h.t.Fatalf("no filler on GPU %d: %+v", index, fs)
	return api.Filler{}
}

// helperGone waits until a filler helper has exited and its simulated
// memory is gone from the registry.
func (h *ckptHarness) helperGone(pid int, start uint64) {
	h.t.Helper()
	waitFor(h.t.(*testing.T), func() bool {
		if procfs.Alive(pid, start) {
			return false
		}
		snap, err := h.reg.Snapshot()
		if err != nil {
			h.t.Fatal(err)
		}
		for _, p := range snap.Procs {
			if p.PID == pid {
				return false
			}
		}
		return true
	})
}

// TestFillerFollowsOscillatingProcess is the attached filler: a process
// that ramps to 8 GiB, frees everything and ramps again under
// run --filled 0.95 never meets a simulated OOM, and once settled the
// GPU's total stays within one chunk of the target; the filler goes with
// the process.
func TestFillerFollowsOscillatingProcess(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	p, err := h.client().Run(ctxT(t), api.RunParams{Name: "policy", Dir: "/", GPU: &api.GPURef{Index: 0}, Filled: 0.95,
		Cmd: h.simjob("--vram", "8192", "--ramp", "1", "--hold", "0.8", "--cycles", "1"), Env: map[string]string{"PATH": os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Filled != 0.95 {
		t.Fatalf("process filled %v, want 0.95", p.Filled)
	}
	f := h.filler(0)
	if f.Process != "policy" || f.TargetMiB != fillTarget || f.User != "root" {
		t.Fatalf("filler %+v", f)
	}
	start, err := procfs.StartTime(f.PID)
	if err != nil {
		t.Fatal(err)
	}

	// Follow the job's log: at its peak and once it has freed everything,
	// the total settles at the target.
	settled := 0
	done := errors.New("done")
	err = h.client().FollowLogs(ctxT(t), "policy", -1, func(l string) error {
		switch {
		case strings.Contains(l, "out of memory"), strings.Contains(l, "OutOfMemory"):
			t.Errorf("the job met an OOM: %s", l)
		case strings.HasPrefix(l, "simjob: allocated 8192"), strings.HasPrefix(l, "simjob: freed all VRAM"):
			h.waitSettled(0, fillTarget)
			settled++
		case strings.HasPrefix(l, "simjob: done"):
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("follow: %v", err)
	}
	if settled != 3 { // peak, freed, peak again
		t.Fatalf("settled %d times, want 3", settled)
	}
	if e := h.waitExit("policy").Exit; e == nil || e.Code == nil || *e.Code != 0 {
		t.Fatalf("job exit %+v, want 0", e)
	}
	h.helperGone(f.PID, start)
	waitFor(t, func() bool {
		fs, err := h.client().Fillers(ctxT(t))
		return err == nil && len(fs) == 0
	})
}

// TestFillerHandsOverToQueuedJob: a standalone filler of root's at 0.95
// hands a queued 8 GiB job of root's its declaration before it runs, and
// grows back when the job ends.
func TestFillerHandsOverToQueuedJob(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.95})
	if err != nil {
		t.Fatal(err)
	}
	if f.TargetMiB != fillTarget || f.HeldMiB == 0 {
		t.Fatalf("fill: %+v", f)
	}
	h.waitSettled(0, fillTarget)

	// The job allocates its whole declaration at once: it fits only if the
	// filler has given the memory back before the job ran.
	h.submit(api.JobSpec{Name: "train", VRAM: api.VRAM{MiB: 8192}, Cmd: h.simjob("--vram", "8192", "--hold", "0.5")})
	j := h.waitJob("train")
	if j.State != api.JobDone {
		t.Fatalf("job %s (%s): %+v", j.State, j.Reason, j.Exit)
	}
	// With the job gone, the filler holds the target again.
	h.waitSettled(0, fillTarget)
	if g := h.filler(0); g.ReservedMiB != 0 {
		waitFor(t, func() bool { return h.filler(0).ReservedMiB == 0 })
	}
	if _, err := h.client().Unfill(ctxT(t), api.GPURef{Index: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.used(0) == 0 })
}

// TestFillerHandsOverToThaw: a frozen process thaws onto a GPU its owner's
// filler holds; admission counts the filler's memory as free and the
// filler frees it before the restore.
func TestFillerHandsOverToThaw(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	h.jobs("model", 0, 10240)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "model"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.95}); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, fillTarget)
	res, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "model"})
	if err != nil {
		t.Fatalf("thaw onto the filled GPU: %v", err)
	}
	if res.State != api.StateRunning {
		t.Fatalf("thaw: %+v", res)
	}
	h.waitSettled(0, fillTarget)
	if p := h.proc("model"); p.State != api.StateRunning {
		t.Fatalf("model %s", p.State)
	}
}

// TestFillerSurvivesRestart: the helper keeps holding while the daemon is
// away and the next daemon re-adopts the same process.
func TestFillerSurvivesRestart(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 16384}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 16384)
	h.stop()
	if got := h.used(0); got+fillChunk <= 16384 {
		t.Fatalf("with the daemon down the GPU holds %d MiB", got)
	}
	h.begin()
	g := h.filler(0)
	if g.PID != f.PID || g.TargetMiB != 16384 {
		t.Fatalf("after restart %+v, before %+v", g, f)
	}
	// It is driven again: a new target applies.
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 8192}}); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 8192)
}

// TestFillerSession: a session filler goes with its connection.
func TestFillerSession(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	c, err := api.Dial(context.Background(), h.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.5, Session: true})
	if err != nil {
		t.Fatal(err)
	}
	start, err := procfs.StartTime(f.PID)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	h.helperGone(f.PID, start)
	if fs, err := h.client().Fillers(ctxT(t)); err != nil || len(fs) != 0 {
		t.Fatalf("fillers after the session closed: %+v, %v", fs, err)
	}
}

// TestFillerBadInput: bad requests are refused with a clear code and leave
// nothing behind.
func TestFillerBadInput(t *testing.T) {
	h := newQueueHarness(t, "2x24G", func(c *config.Config) {})
	cl := h.client()
	for _, tc := range []struct {
		p    api.FillParams
		code api.Code
	}{
		{api.FillParams{GPU: &api.GPURef{Index: 0}}, api.CodeInvalidArgument},
		{api.FillParams{Ratio: 0.5}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 1.5}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: -0.5}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 1e-300}, api.CodeInvalidArgument}, // 0 MiB, the GPU's one filler taken
		{api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.5, MiB: api.VRAM{MiB: 1024}}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 30000}}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{Auto: true}}, api.CodeInvalidArgument},
		{api.FillParams{GPU: &api.GPURef{Index: 7}, Ratio: 0.5}, api.CodeInvalidArgument},
	} {
		_, err := cl.Fill(ctxT(t), tc.p)
		wantCode(t, err, tc.code)
	}
	_, err := cl.Unfill(ctxT(t), api.GPURef{Index: 1})
	wantCode(t, err, api.CodeNotFound)
	_, err = cl.Run(ctxT(t), api.RunParams{Name: "two", Dir: "/", Cmd: []string{"sleep", "100"}, Filled: 0.9,
		Env: map[string]string{"PATH": os.Getenv("PATH")}})
	wantCode(t, err, api.CodeInvalidArgument) // two GPUs
	if _, err := cl.Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 1}, Ratio: 0.5}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Run(ctxT(t), api.RunParams{Name: "one", Dir: "/", Cmd: []string{"sleep", "100"}, Filled: 0.9,
		GPU: &api.GPURef{Index: 1}, Env: map[string]string{"PATH": os.Getenv("PATH")}})
	wantCode(t, err, api.CodeConflict) // GPU 1 has a filler
	fs, err := cl.Fillers(ctxT(t))
	if err != nil || len(fs) != 1 || fs[0].Index != 1 {
		t.Fatalf("fillers %+v, %v", fs, err)
	}
	ps, err := cl.PS(ctxT(t), api.PSParams{})
	if err != nil || len(ps) != 0 {
		t.Fatalf("processes after refused runs: %+v, %v", ps, err)
	}
}

// TestFillerHandsOverToLease: a lease of the filler's owner is granted on
// the filled GPU, and the memory it holds is free when acquire answers.
func TestFillerHandsOverToLease(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.95}); err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, fillTarget)
	l, err := h.client().Acquire(ctxT(t), api.AcquireParams{MinFree: api.VRAM{MiB: 8192}})
	if err != nil {
		t.Fatalf("acquire beside the owner's filler: %v", err)
	}
	if free := 24576 - h.used(0); free < 8192 {
		t.Fatalf("lease %s granted with %d MiB free, want 8192", l.ID, free)
	}
	if f := h.filler(0); f.ReservedMiB != 8192 {
		t.Fatalf("filler reserves %d MiB for the lease, want 8192", f.ReservedMiB)
	}
}

// TestFillerHoldsTargetAsNVMLCounts is gpu-check's filler phase on a
// simulated GPU that accounts as an H200 with driver 580.159.04 does: the
// driver reserves 616 MiB, which NVML counts in the GPU's total and used
// memory but cuMemGetInfo leaves out of its total, and the helper's CUDA
// context costs 518 MiB, which both count as used. The GPU's usage as NVML
// reports it settles within one chunk below the target, beside a 4 GiB job
// and again once the job is gone; the filler's held_mib includes its
// context, as NVML's per-process usage does.
func TestFillerHoldsTargetAsNVMLCounts(t *testing.T) {
	const reserved, context = 616, 518
	h := newQueueHarness(t, fillGPU+":reserved=616M:context=518M")
	const target = 22118 // 0.9 of 24576 MiB
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if f.TargetMiB != target {
		t.Fatalf("fill: %+v", f)
	}
	// fill answers once the helper holds what it can: settled already.
	if u := h.used(0); u > target || u+fillChunk <= target {
		t.Fatalf("GPU 0 holds %d MiB once fill answered; want within %d MiB below %d", u, fillChunk, target)
	}
	waitFor(t, func() bool { // the daemon's next sample sees the helper
		held := h.filler(0).HeldMiB
		return held > context && (held-context)%fillChunk == 0 && held+reserved == h.used(0)
	})

	h.submit(api.JobSpec{Name: "work", VRAM: api.VRAM{MiB: 4096}, Cmd: h.simjob("--vram", "4096")})
	h.waitRunning("work")
	h.followCount("work", "simjob: allocated 4096", 1)
	h.waitSettled(0, target)
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "work"}); err != nil {
		t.Fatal(err)
	}
	h.waitJob("work")
	h.waitSettled(0, target)
	if _, err := h.client().Unfill(ctxT(t), api.GPURef{Index: 0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.used(0) == reserved })
}

// TestStatusDoesNotWaitOnAFillerBeingDriven: while the daemon waits on a
// filler's helper (stopped here, as a helper can be slow to allocate on a
// real GPU, for up to the exchange's timeout), status and the filler list
// answer at once, with the filler as it was before that change; the
// change then completes.
func TestStatusDoesNotWaitOnAFillerBeingDriven(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 8192)
	if err := unix.Kill(f.PID, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Kill(f.PID, unix.SIGCONT) })
	waitFor(t, func() bool { return allThreadsStopped(t, f.PID) })
	refilled := make(chan error, 1)
	go func() {
		_, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 16384}})
		refilled <- err
	}()
	// Polled: nothing tells of bytes arriving at a stopped process.
	waitFor(t, func() bool { return unreadBytes(t, f.PID) > 0 })

	st, err := h.client().Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	list, err := h.client().Fillers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refilled:
		t.Fatalf("the change to a stopped helper ended (%v) before status answered", err)
	default:
	}
	if len(st.Fillers) != 1 || st.Fillers[0].TargetMiB != 8192 || len(list) != 1 || list[0].TargetMiB != 8192 {
		t.Fatalf("while the change is under way: status %+v, fillers %+v; want the filler as it was", st.Fillers, list)
	}

	if err := unix.Kill(f.PID, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-refilled; err != nil {
		t.Fatalf("the change, once the helper went on: %v", err)
	}
	h.waitSettled(0, 16384)
	if g := h.filler(0); g.TargetMiB != 16384 {
		t.Fatalf("after the change: %+v", g)
	}
}

// unreadBytes is how many bytes wait unread in the sockets and pipes pid
// holds (a filler helper's requests come on its standard input).
func unreadBytes(t *testing.T, pid int) int {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		fd, aerr := strconv.Atoi(e.Name())
		if err != nil || aerr != nil || !strings.HasPrefix(target, "socket:") && !strings.HasPrefix(target, "pipe:") {
			continue
		}
		dup, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := unix.IoctlGetInt(dup, unix.TIOCINQ); err == nil { // TIOCINQ is FIONREAD
			total += n
		}
		unix.Close(dup)
	}
	return total
}

// TestFillerLogHeldToTheCap: a GPU's filler helpers append to one log,
// every fill in turn; a new helper first rotates it past --log-max-bytes,
// as a process's log is, or one user's loop of fill and unfill would grow
// it for ever on the log directory's filesystem (16 KB a second on the
// 2-core VM).
func TestFillerLogHeldToTheCap(t *testing.T) {
	h := newQueueHarness(t, fillGPU, func(c *config.Config) { c.LogMaxBytes, c.LogKeep = 4096, 1 })
	path := filepath.Join(h.d.fillerLogDir(), "filler-0.log")
	old := strings.Repeat("an earlier helper's line\n", 400) // 10,000 bytes
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 8192}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path + ".1"); err != nil || string(b) != old {
		t.Fatalf("the rotated copy holds %d bytes (%v), want the 10,000 before the helper started", len(b), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 4096 {
		t.Fatalf("the filler's log: %v (%v), want it started over below the cap", fi.Size(), err)
	}
}
