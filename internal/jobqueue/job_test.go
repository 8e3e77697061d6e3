package jobqueue_test

import (
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestJobActive(t *testing.T) {
	cases := []struct {
		state api.JobState
		want  bool
	}{
		{api.JobQueued, false},
		{api.JobStarting, true},
		{api.JobRunning, true},
		{api.JobPreempted, true},
		{api.JobDone, false},
		{api.JobFailed, false},
		{api.JobTimedOut, false},
		{api.JobCancelled, false},
		{api.JobInfeasible, false},
		{"", false},
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			j := &jobqueue.Job{State: tc.state}
			if got := j.Active(); got != tc.want {
				t.Errorf("Active() in %q = %v, want %v", tc.state, got, tc.want)
			}
			// Active jobs are never finished ones.
			if j.Active() && tc.state.Terminal() {
				t.Errorf("%q is both active and terminal", tc.state)
			}
		})
	}
}

func TestJobCurrent(t *testing.T) {
	cases := []struct {
		name     string
		attempts []api.Attempt
		wantN    int // 0: nil
	}{
		{"nil attempts", nil, 0},
		{"empty attempts", []api.Attempt{}, 0},
		{"one", []api.Attempt{{N: 1}}, 1},
		{"last of three", []api.Attempt{{N: 1}, {N: 2}, {N: 3}}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobqueue.Job{Attempts: tc.attempts}
			cur := j.Current()
			if tc.wantN == 0 {
				if cur != nil {
					t.Fatalf("Current() = %+v, want nil", cur)
				}
				return
			}
			if cur == nil || cur.N != tc.wantN {
				t.Fatalf("Current() = %+v, want attempt %d", cur, tc.wantN)
			}
			// It points into the job, so a caller's copy can be edited in place.
			cur.Outcome = "done"
			if j.Attempts[len(j.Attempts)-1].Outcome != "done" {
				t.Error("Current() is not the job's own last attempt")
			}
		})
	}
}

func TestJobPeakAndMaxPeak(t *testing.T) {
	cases := []struct {
		name     string
		attempts []api.Attempt
		want     map[string]uint64
		wantMax  uint64
	}{
		{"no attempts", nil, map[string]uint64{}, 0},
		{"no samples", []api.Attempt{{N: 1}, {N: 2, PeakMiB: map[string]uint64{}}}, map[string]uint64{}, 0},
		{"one attempt", []api.Attempt{{PeakMiB: map[string]uint64{"GPU-0": 300, "GPU-1": 500}}}, map[string]uint64{"GPU-0": 300, "GPU-1": 500}, 500},
		{
			"highest per GPU over attempts",
			[]api.Attempt{
				{PeakMiB: map[string]uint64{"GPU-0": 300, "GPU-1": 900}},
				{PeakMiB: map[string]uint64{"GPU-0": 700}},
				{PeakMiB: map[string]uint64{"GPU-1": 100, "GPU-2": 50}},
			},
			map[string]uint64{"GPU-0": 700, "GPU-1": 900, "GPU-2": 50},
			900,
		},
		{"zero peak kept", []api.Attempt{{PeakMiB: map[string]uint64{"GPU-0": 0}}}, map[string]uint64{"GPU-0": 0}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobqueue.Job{Attempts: tc.attempts}
			got := j.Peak()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Peak() = %v, want %v", got, tc.want)
			}
			if m := jobqueue.MaxPeak(got); m != tc.wantMax {
				t.Errorf("MaxPeak = %d, want %d", m, tc.wantMax)
			}
			// Peak is a new map: changing it changes no attempt.
			got["GPU-0"] = 1 << 40
			if jobqueue.MaxPeak(j.Peak()) != tc.wantMax {
				t.Error("Peak() shares a map with an attempt")
			}
		})
	}
	if m := jobqueue.MaxPeak(nil); m != 0 {
		t.Errorf("MaxPeak(nil) = %d", m)
	}
}

func TestVerdict(t *testing.T) {
	cases := []struct {
		name           string
		declared, peak uint64
		want           string
	}{
		{"undeclared, nothing seen", 0, 0, "undeclared; no GPU memory seen"},
		{"undeclared, suggests 1.25x", 0, 4096, "undeclared; peak 4096 MiB per GPU: declare vram=5120M to share GPUs"},
		{"undeclared, suggestion rounded up", 0, 1001, "undeclared; peak 1001 MiB per GPU: declare vram=1252M to share GPUs"},
		{"under-declared", 4096, 4097, "under-declared: peak 4097 MiB per GPU went past the 4096 MiB declared"},
		{"exactly declared", 4096, 4096, "ok: peak 4096 MiB per GPU of 4096 MiB declared"},
		{"exactly half is ok", 4096, 2048, "ok: peak 2048 MiB per GPU of 4096 MiB declared"},
		{"just under half", 4096, 2047, "over-declared: peak 2047 MiB per GPU is 49% of the 4096 MiB declared"},
		{"over-declared", 4096, 1000, "over-declared: peak 1000 MiB per GPU is 24% of the 4096 MiB declared"},
		{"declared, nothing seen", 4096, 0, "over-declared: peak 0 MiB per GPU is 0% of the 4096 MiB declared"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobqueue.Verdict(tc.declared, tc.peak); got != tc.want {
				t.Errorf("Verdict(%d, %d) =\n %q, want\n %q", tc.declared, tc.peak, got, tc.want)
			}
		})
	}
}
