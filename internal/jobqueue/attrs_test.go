package jobqueue_test

import (
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestJobMPS(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threads   int
		limit     uint64
		declared  uint64
		wantMPS   bool
		wantLimit uint64
	}{
		{name: "not a client", declared: 4096},
		{name: "threads: limit is the declaration", threads: 50, declared: 4096, wantMPS: true, wantLimit: 4096},
		{name: "threads on an undeclared job: no limit", threads: 50, wantMPS: true},
		{name: "explicit limit", threads: 50, limit: 2048, declared: 4096, wantMPS: true, wantLimit: 2048},
		{name: "limit alone", limit: 8192, declared: 4096, wantMPS: true, wantLimit: 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobqueue.Job{MPSThreads: tc.threads, MPSMemLimitMiB: tc.limit, VRAMMiB: tc.declared}
			if got := j.MPS(); got != tc.wantMPS {
				t.Errorf("MPS() = %v, want %v", got, tc.wantMPS)
			}
			if got := j.MPSLimitMiB(); got != tc.wantLimit {
				t.Errorf("MPSLimitMiB() = %d, want %d", got, tc.wantLimit)
			}
		})
	}
	// A raised declaration (an out-of-memory retry) raises a default limit.
	j := &jobqueue.Job{MPSThreads: 25, VRAMMiB: 4096}
	j.VRAMMiB = 5120
	if got := j.MPSLimitMiB(); got != 5120 {
		t.Errorf("after a raise: %d, want 5120", got)
	}
}

// TestAttributesPersist: nice, the MPS attributes and the submitter's CPUs
// survive a restart.
func TestAttributesPersist(t *testing.T) {
	h := newHarness(t)
	j := spec("prio", api.JobQueued)
	j.Nice, j.MPSThreads, j.MPSMemLimitMiB, j.CPUs = 5, 50, 2048, "2-5,8"
	h.add(t, j)
	got, ok := h.reopen(t).Owned(1000, "prio")
	if !ok {
		t.Fatal("job lost")
	}
	if got.Nice != 5 || got.MPSThreads != 50 || got.MPSMemLimitMiB != 2048 || got.CPUs != "2-5,8" {
		t.Errorf("after reload: nice %d, mps threads %d, limit %d, cpus %q", got.Nice, got.MPSThreads, got.MPSMemLimitMiB, got.CPUs)
	}
}

func TestLoadValidatesAttributes(t *testing.T) {
	for name, mod := range map[string]func(*jobqueue.Job){
		"nice too low":       func(j *jobqueue.Job) { j.Nice = -21 },
		"nice too high":      func(j *jobqueue.Job) { j.Nice = 20 },
		"mps threads < 0":    func(j *jobqueue.Job) { j.MPSThreads = -1 },
		"mps threads > 100%": func(j *jobqueue.Job) { j.MPSThreads = 101 },
		"cpus malformed":     func(j *jobqueue.Job) { j.CPUs = "3-1" },
	} {
		t.Run(name, func(t *testing.T) {
			st, err := store.OpenRecords(filepath.Join(t.TempDir(), "jobs"))
			if err != nil {
				t.Fatal(err)
			}
			j := record(1, "bad")
			mod(j)
			if err := st.Put("j1", j); err != nil {
				t.Fatal(err)
			}
			problems, err := jobqueue.New(st, nil).Load()
			if err != nil || len(problems) != 1 || problems[0].Key != "j1" {
				t.Fatalf("Load: %v, problems %+v; want j1 quarantined", err, problems)
			}
		})
	}
}
