package daemon

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// startExternal runs a simulated GPU job the daemon does not manage, on
// GPU index gpu, and returns once it has allocated vram MiB.
func (h *ckptHarness) startExternal(gpu string, vram string) *exec.Cmd {
	h.t.Helper()
	cmd := exec.Command(h.bins.SimJob, "--vram", vram)
	cmd.Env = append(os.Environ(), "GPUSCHED_SIM_DIR="+h.cfg.SimDir, "CUDA_VISIBLE_DEVICES="+gpu)
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "simjob: allocated") {
			go func() {
				for sc.Scan() {
				}
			}()
			h.refresh()
			return cmd
		}
	}
	h.t.Fatalf("external simjob never allocated: %v", sc.Err())
	return nil
}

// TestQueueHoldsExternalAtPeak: an unmanaged process holding 16G is
// charged its peak plus the spike buffer (17.6G), so a 6G job that would
// fit beside its bare 16G waits until it exits.
func TestQueueHoldsExternalAtPeak(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	ext := h.startExternal("0", "16384")
	h.submit(api.JobSpec{Name: "six", Cmd: h.simjob("--vram", "6144"), VRAM: gib(6)})
	h.submit(api.JobSpec{Name: "probe", Cmd: h.simjob("--vram", "256"), VRAM: api.VRAM{MiB: 256}})
	h.waitRunning("probe")
	if j := h.job("six"); j.State != api.JobQueued || !strings.HasPrefix(j.Reason, "no_memory") {
		t.Fatalf("six beside a 16G external: %s %q", j.State, j.Reason)
	}
	ext.Process.Kill()
	ext.Wait()
	h.waitRunning("six")
}

// TestQueuePreemptsByFreezing: a higher-priority job freezes a preemptible
// lower-priority one to fit, and the frozen one is thawed back by itself
// when the memory returns, its counter going on. An equal priority never
// preempts.
func TestQueuePreemptsByFreezing(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	h.submit(api.JobSpec{Name: "low", Cmd: h.simjob("--vram", "16384", "--host-mem", "16", "--tick", "0.02"), VRAM: gib(16), Preemptible: true})
	h.waitRunning("low")
	h.followCount("low", "tick 3", 1)
	h.submit(api.JobSpec{Name: "peer", Cmd: h.simjob("--vram", "16384"), VRAM: gib(16)})
	h.submit(api.JobSpec{Name: "probe", Cmd: h.simjob("--vram", "256"), VRAM: api.VRAM{MiB: 256}})
	h.waitRunning("probe")
	if j := h.job("peer"); j.State != api.JobQueued || h.job("low").State != api.JobRunning {
		t.Fatalf("equal priority: peer %s, low %s", j.State, h.job("low").State)
	}
	if _, err := h.client().Cancel(ctxT(t), "peer"); err != nil {
		t.Fatal(err)
	}

	high := h.submit(api.JobSpec{Name: "high", Cmd: h.simjob("--vram", "16384", "--hold", "0.5"), VRAM: gib(16), Priority: 5})
	h.waitJobState("low", api.JobPreempted)
	p := h.proc("low")
	if p.State != api.StateFrozen || p.PreemptedBy != high.ID {
		t.Fatalf("low while preempted: %s preempted_by %q", p.State, p.PreemptedBy)
	}
	ticks := h.lastTick("low")
	if j := h.waitJob("high"); j.State != api.JobDone {
		t.Fatalf("high: %s %q", j.State, j.Reason)
	}
	h.waitJobState("low", api.JobRunning)
	h.verifyContinued("low", ticks)
	low := h.job("low")
	if low.Attempts[0].Preempted != 1 || len(low.Attempts) != 1 {
		t.Fatalf("low attempts: %+v", low.Attempts)
	}
	if p := h.proc("low"); p.PreemptedBy != "" || p.State != api.StateRunning {
		t.Fatalf("low after thaw: %s preempted_by %q", p.State, p.PreemptedBy)
	}
}

// TestPreemptedJobStaysPreemptedWhileThawing: a pass that finds a
// preempted job's process being thawed back leaves the job preempted; it
// goes back to running only with its process running, preempted_by
// cleared in the same pass. (Marked running mid-thaw, the job said running
// while its process still said preempted_by.) The thaw in progress is
// the test's, under the process's operation lock, as a thaw holds it.
func TestPreemptedJobStaysPreemptedWhileThawing(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	h.submit(api.JobSpec{Name: "low", Cmd: h.simjob("--vram", "16384", "--tick", "0.02"), VRAM: gib(16), Preemptible: true})
	h.waitRunning("low")
	high := h.submit(api.JobSpec{Name: "high", Cmd: h.simjob("--vram", "16384", "--hold", "600"), VRAM: gib(16), Priority: 5})
	h.waitJobState("low", api.JobPreempted)

	unlock, err := h.d.ops.lock(ctxT(t), proctable.Key{Name: "low"})
	if err != nil {
		t.Fatal(err)
	}
	setState := func(s api.State) {
		if _, err := h.d.table.Update(proctable.Key{Name: "low"}, func(r *proctable.Record) error { r.State = s; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setState(api.StateThawing)
	h.d.reconcileJobs()
	if j := h.job("low"); j.State != api.JobPreempted {
		t.Errorf("low while its process is thawing: %s, want %s", j.State, api.JobPreempted)
	}
	setState(api.StateFrozen)
	unlock()

	if _, err := h.client().Cancel(ctxT(t), high.Name); err != nil {
		t.Fatal(err)
	}
	h.waitJobState("low", api.JobRunning)
	if p := h.proc("low"); p.PreemptedBy != "" || p.State != api.StateRunning {
		t.Fatalf("low running again: process %s preempted_by %q", p.State, p.PreemptedBy)
	}
}

// TestQueueRetriesOOMOnly: an attempt that ends in a CUDA out-of-memory
// error is retried with its declaration raised to 1.25 x max(peak,
// declared); other failures use no retry and keep their exit code.
func TestQueueRetriesOOMOnly(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	marker := filepath.Join(t.TempDir(), "oom-marker")
	h.submit(api.JobSpec{Name: "oom", Cmd: h.simjob("--vram", "1024", "--oom-once", marker, "--hold", "0.1"),
		VRAM: gib(4), Retries: 2})
	j := h.waitJob("oom")
	if j.State != api.JobDone || len(j.Attempts) != 2 {
		t.Fatalf("oom job: %s %q, %d attempts", j.State, j.Reason, len(j.Attempts))
	}
	first, second := j.Attempts[0], j.Attempts[1]
	if !first.OOM || first.Outcome != "oom" || first.Exit == nil || first.Exit.Code == nil || *first.Exit.Code != 1 {
		t.Fatalf("first attempt: %+v", first)
	}
	if second.VRAMMiB != 5120 || j.VRAMMiB != 5120 || j.RetriesLeft != 1 || second.Outcome != "done" {
		t.Fatalf("retry: attempt vram %d, job vram %d, retries left %d, outcome %s", second.VRAMMiB, j.VRAMMiB, j.RetriesLeft, second.Outcome)
	}
	if !strings.HasPrefix(j.Verdict, "over-declared") {
		t.Fatalf("verdict: %q", j.Verdict)
	}

	h.submit(api.JobSpec{Name: "fails", Cmd: h.simjob("--exit-code", "3", "--hold", "0.05"), Retries: 2})
	j = h.waitJob("fails")
	if j.State != api.JobFailed || len(j.Attempts) != 1 || j.RetriesLeft != 2 || j.Exit == nil || j.Exit.Code == nil || *j.Exit.Code != 3 {
		t.Fatalf("failing job: %s, %d attempts, %d retries left, exit %+v", j.State, len(j.Attempts), j.RetriesLeft, j.Exit)
	}

	marker2 := filepath.Join(t.TempDir(), "oom-marker")
	h.submit(api.JobSpec{Name: "noretry", Cmd: h.simjob("--vram", "1024", "--oom-once", marker2), VRAM: gib(1)})
	j = h.waitJob("noretry")
	if j.State != api.JobFailed || !j.Attempts[0].OOM || !strings.Contains(j.Reason, "no retries left") {
		t.Fatalf("oom without retries: %s %q", j.State, j.Reason)
	}
}

// TestQueueTimeoutTermThenKill: a job past its timeout gets SIGTERM, and
// SIGKILL after the grace when it ignores it; the signal is kept exactly.
func TestQueueTimeoutTermThenKill(t *testing.T) {
	h := newQueueHarness(t, "1x24G", func(c *config.Config) { c.JobKillGrace = 200 * time.Millisecond })
	h.submit(api.JobSpec{Name: "sleepy", Cmd: []string{"sleep", "60"}, Timeout: api.Duration(300 * time.Millisecond)})
	h.submit(api.JobSpec{Name: "stubborn", Cmd: []string{"sh", "-c", "trap '' TERM; sleep 60"}, Timeout: api.Duration(300 * time.Millisecond)})
	for name, sig := range map[string]string{"sleepy": "SIGTERM", "stubborn": "SIGKILL"} {
		j := h.waitJob(name)
		if j.State != api.JobTimedOut || j.Exit == nil || j.Exit.Signal != sig || j.Attempts[0].Outcome != "timed_out" {
			t.Fatalf("%s: %s exit %+v outcome %s", name, j.State, j.Exit, j.Attempts[0].Outcome)
		}
	}
}

// TestQueueCancel: a queued job is cancelled without running; a running
// one ends by SIGTERM; a finished one cannot be cancelled.
func TestQueueCancel(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	c := h.client()
	h.submit(api.JobSpec{Name: "run", Cmd: h.simjob("--vram", "20480"), VRAM: gib(20)})
	h.waitRunning("run")
	h.submit(api.JobSpec{Name: "wait", Cmd: h.simjob("--vram", "20480"), VRAM: gib(20)})
	j, err := c.Cancel(ctxT(t), "wait")
	if err != nil || j.State != api.JobCancelled || len(j.Attempts) != 0 {
		t.Fatalf("cancel queued: %+v %v", j, err)
	}
	if j, err = c.Cancel(ctxT(t), "run"); err != nil || j.State != api.JobCancelled || j.Exit.Signal != "SIGTERM" {
		t.Fatalf("cancel running: %+v %v", j, err)
	}
	_, err = c.Cancel(ctxT(t), "run")
	wantCode(t, err, api.CodeConflict)
	_, err = c.Cancel(ctxT(t), "nosuch")
	wantCode(t, err, api.CodeNotFound)
	if p := h.proc("run"); p.State != api.StateExited {
		t.Fatalf("cancelled job's process: %s", p.State)
	}
}

// TestLeaseReleasedOnDisconnect: a whole-GPU lease keeps jobs off its GPU
// until the connection that took it closes; amounts share a GPU.
func TestLeaseReleasedOnDisconnect(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	holder := h.client()
	l, err := holder.Acquire(ctxT(t), api.AcquireParams{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GPUs) != 1 || l.GPUs[0].Index != 0 || l.CUDAVisibleDevices != l.GPUs[0].UUID || l.MiB != 0 {
		t.Fatalf("lease: %+v", l)
	}
	_, err = h.client().Acquire(ctxT(t), api.AcquireParams{GPUs: 1, MinFree: gib(1)})
	wantCode(t, err, api.CodeResourceExhausted)
	_, err = h.client().Acquire(ctxT(t), api.AcquireParams{GPUs: 2})
	wantCode(t, err, api.CodeResourceExhausted)

	h.submit(api.JobSpec{Name: "blocked", Cmd: h.simjob("--vram", "1024"), VRAM: gib(1)})
	if _, err := h.client().Leases(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	h.waitRunning("blocked")
	if _, err := h.client().Cancel(ctxT(t), "blocked"); err != nil {
		t.Fatal(err)
	}

	c := h.client()
	a, err := c.Acquire(ctxT(t), api.AcquireParams{MinFree: gib(10), Timeout: api.Duration(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Acquire(ctxT(t), api.AcquireParams{MinFree: gib(10)}); err != nil {
		t.Fatalf("a second 10G lease beside the first: %v", err)
	}
	_, err = h.client().Acquire(ctxT(t), api.AcquireParams{MinFree: gib(10)})
	wantCode(t, err, api.CodeResourceExhausted)
	if _, err := c.Release(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Release(ctxT(t), a.ID)
	wantCode(t, err, api.CodeNotFound)
}
