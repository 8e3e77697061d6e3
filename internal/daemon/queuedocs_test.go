package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/placement"
)

// TestQueueDocsShowTheReasons: every example reason in docs/queue.md is
// what the daemon says (placement's wait, in the words `jobs` shows) in
// the situation the document describes.
func TestQueueDocsShowTheReasons(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "queue.md"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	gpu := func(i int, temp int, declared ...uint64) placement.GPU {
		g := placement.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), TotalMiB: 24576, TempC: &temp}
		for k, mib := range declared {
			g.Occupants = append(g.Occupants, placement.Occupant{Kind: placement.Managed, ID: fmt.Sprintf("p%d-%d", i, k),
				DeclaredMiB: mib, Exclusive: mib == 0})
		}
		return g
	}
	opts := placement.DefaultOptions()
	opts.MaxTempC = 85
	job := func(id string, mib uint64, age time.Duration) placement.Job {
		return placement.Job{ID: id, Owner: "ana", GPUs: 1, VRAMMiB: mib, QueuedAt: now.Add(-age), Seq: uint64(len(id))}
	}
	waits := func(gpus []placement.GPU, queue ...placement.Job) map[string]string {
		plan := placement.Place(placement.Snapshot{Now: now, GPUs: gpus, Options: opts}, queue)
		out := map[string]string{}
		for _, w := range plan.Waits {
			out[w.JobID] = waitWords(w)
		}
		for _, w := range plan.Infeasible {
			out[w.JobID] = w.Detail
		}
		return out
	}
	stale, _ := staleWaits(&gpuView{stale: "nvml: GPU is lost", staleSince: now}, []placement.Job{job("j1", 4096, 0)})
	examples := map[string]string{
		"no_memory":      waits([]placement.GPU{gpu(0, 40, 20000), gpu(1, 40, 15576)}, job("j1", 20480, 0))["j1"],
		"no_idle_gpu":    waits([]placement.GPU{gpu(0, 40, 4096), gpu(1, 40, 0)}, job("j1", 0, 0))["j1"],
		"unhealthy":      waits([]placement.GPU{gpu(0, 91), gpu(1, 40, 22000)}, job("j1", 4096, 0))["j1"],
		"reserved":       waits([]placement.GPU{gpu(0, 40, 12000), gpu(1, 40, 22000)}, job("j1", 20480, time.Hour), job("j2", 4096, 0))["j2"],
		"infeasible":     waits([]placement.GPU{gpu(0, 40), gpu(1, 40)}, job("j1", 30720, 0))["j1"],
		"stale_gpu_data": waitWords(stale[0]),
	}
	for reason, words := range examples {
		if words == "" {
			t.Errorf("%s: the situation does not give that reason", reason)
			continue
		}
		if !strings.Contains(string(doc), "`"+words+"`") {
			t.Errorf("docs/queue.md lacks the %s example as the daemon says it:\n`%s`", reason, words)
		}
	}
}
