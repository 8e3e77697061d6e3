package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func gib(n uint64) api.VRAM { return api.VRAM{MiB: n << 10} }

// TestQueuePacksBackfillsAndDispatchesOnExit: four 10G jobs pack two per
// 24G GPU; a fifth waits for memory while a smaller later one backfills;
// ending one running job starts the waiting one on the GPU it freed.
func TestQueuePacksBackfillsAndDispatchesOnExit(t *testing.T) {
	h := newQueueHarness(t, "2x24G")
	hold := h.simjob("--vram", "10240")
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		h.submit(api.JobSpec{Name: n, Cmd: hold, VRAM: gib(10)})
	}
	h.waitRunning(names...)
	perGPU := map[string]int{}
	gpuOf := map[string]string{}
	for _, n := range names {
		j := h.job(n)
		if len(j.Attempts) != 1 || len(j.Attempts[0].GPUs) != 1 {
			t.Fatalf("job %s: %+v", n, j.Attempts)
		}
		gpuOf[n] = j.Attempts[0].GPUs[0]
		perGPU[gpuOf[n]]++
	}
	if len(perGPU) != 2 {
		t.Fatalf("jobs per GPU: %v, want two on each", perGPU)
	}
	for uuid, n := range perGPU {
		if n != 2 {
			t.Fatalf("jobs per GPU: %v (GPU %s has %d)", perGPU, uuid, n)
		}
	}

	h.submit(api.JobSpec{Name: "big", Cmd: hold, VRAM: gib(10)})
	h.submit(api.JobSpec{Name: "small", Cmd: h.simjob("--vram", "3072"), VRAM: gib(3)})
	h.waitRunning("small")
	big := h.job("big")
	if big.State != api.JobQueued || !strings.HasPrefix(big.Reason, "no_memory") {
		t.Fatalf("big while full: %s %q", big.State, big.Reason)
	}

	a, err := h.client().Cancel(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	if a.State != api.JobCancelled || a.Exit == nil || a.Exit.Signal != "SIGTERM" {
		t.Fatalf("cancelled a: %s %+v", a.State, a.Exit)
	}
	h.waitRunning("big")
	if g := h.job("big").Attempts[0].GPUs[0]; g != gpuOf["a"] {
		t.Fatalf("big started on %s, not on the GPU a freed (%s)", g, gpuOf["a"])
	}
}

// TestQueueInfeasibleAndBadInput: jobs that can never fit are refused at
// submit with the reason; a batch with one bad or infeasible job queues
// nothing and names each.
func TestQueueInfeasibleAndBadInput(t *testing.T) {
	h := newQueueHarness(t, "2x24G")
	c := h.client()
	for _, c2 := range []struct {
		spec api.JobSpec
		why  string
	}{
		{api.JobSpec{Name: "huge", Cmd: []string{"true"}, Dir: "/", VRAM: gib(30)}, "needs 30720+512 MiB on 1 GPU; the most it can ever get is 24576 MiB"},
		{api.JobSpec{Name: "edge", Cmd: []string{"true"}, Dir: "/", VRAM: gib(24)}, "needs 24576+512 MiB on 1 GPU"},
		{api.JobSpec{Name: "many", Cmd: []string{"true"}, Dir: "/", VRAM: gib(1), GPUs: 3}, "needs 3 GPUs; the machine has 2"},
	} {
		_, err := c.Submit(ctxT(t), api.SubmitParams{JobSpec: c2.spec})
		wantCode(t, err, api.CodeInvalidArgument)
		if want := fmt.Sprintf("submit %q: can never start on this machine: %s", c2.spec.Name, c2.why); !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", c2.spec.Name, err, want)
		}
	}
	before, err := c.Jobs(ctxT(t), api.JobsParams{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 0 {
		t.Fatalf("refused jobs were queued: %+v", before)
	}
	_, err = c.Submit(ctxT(t), api.SubmitParams{Jobs: []api.JobSpec{
		{Name: "ok", Cmd: []string{"true"}, Dir: "/"},
		{Name: "bad name/x", Cmd: []string{"true"}, Dir: "/"},
		{Name: "neg", Cmd: []string{"true"}, Dir: "/", Retries: -1},
		{Name: "huge", Cmd: []string{"true"}, Dir: "/", VRAM: gib(30)},
	}})
	wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "job 2") || !strings.Contains(err.Error(), "job 3") || !strings.Contains(err.Error(), `job 4: submit "huge": can never start`) {
		t.Fatalf("error does not name every bad job: %v", err)
	}
	for _, bad := range []api.SubmitParams{
		{JobSpec: api.JobSpec{Name: "empty", Dir: "/"}},
		{JobSpec: api.JobSpec{Name: "nodir", Cmd: []string{"true"}, Dir: "relative"}},
		{JobSpec: api.JobSpec{Name: "nocmd", Cmd: []string{"/no/such/binary"}, Dir: "/"}},
		{JobSpec: api.JobSpec{Name: "gpus", Cmd: []string{"true"}, Dir: "/", GPUs: -1}},
		// A field of one job's beside a batch, which the batch's jobs
		// would not have had: root's user (they ran as root), a priority.
		{JobSpec: api.JobSpec{User: "nobody", Dir: "/"}, Jobs: []api.JobSpec{{Name: "as-whom", Cmd: []string{"true"}}}},
		{JobSpec: api.JobSpec{Priority: 5}, Jobs: []api.JobSpec{{Name: "prio", Cmd: []string{"true"}, Dir: "/"}}},
	} {
		_, err := c.Submit(ctxT(t), bad)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	after, err := c.Jobs(ctxT(t), api.JobsParams{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("refused submissions queued something: %d jobs before, %d after", len(before), len(after))
	}
}

// TestQueueMultiGPUAndUndeclared: a 2-GPU job gets two distinct GPUs, both
// in its CUDA_VISIBLE_DEVICES; an undeclared job waits for a whole idle GPU.
func TestQueueMultiGPUAndUndeclared(t *testing.T) {
	h := newQueueHarness(t, "2x24G")
	h.submit(api.JobSpec{Name: "pair", Cmd: h.simjob("--vram", "4096"), VRAM: gib(4), GPUs: 2})
	h.waitRunning("pair")
	j := h.job("pair")
	g := j.Attempts[0].GPUs
	if len(g) != 2 || g[0] == g[1] {
		t.Fatalf("pair GPUs: %v", g)
	}
	p := h.proc("pair")
	if len(p.GPUs) != 2 || p.GPUs[0].UsedMiB != 4096 || p.GPUs[1].UsedMiB != 4096 {
		t.Fatalf("pair process GPUs: %+v", p.GPUs)
	}
	h.submit(api.JobSpec{Name: "whole", Cmd: h.simjob("--vram", "1024")})
	h.submit(api.JobSpec{Name: "probe", Cmd: h.simjob("--vram", "512"), VRAM: api.VRAM{MiB: 512}})
	h.waitRunning("probe")
	if w := h.job("whole"); w.State != api.JobQueued || !strings.HasPrefix(w.Reason, "no_idle_gpu") {
		t.Fatalf("undeclared job beside a busy pair: %s %q", w.State, w.Reason)
	}
	if _, err := h.client().Cancel(ctxT(t), "pair"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Cancel(ctxT(t), "probe"); err != nil {
		t.Fatal(err)
	}
	h.waitRunning("whole")
}
