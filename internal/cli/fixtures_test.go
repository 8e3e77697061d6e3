package cli

import (
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// Canned daemon data shared by the tests.

func intp(n int) *int { return &n }

// proc is a running process named name.
func proc(name string) api.Process {
	now := time.Now()
	return api.Process{
		Name: name, ID: "id-" + name, State: api.StateRunning, PID: 4242, InitPID: 4241,
		UID: 1000, GID: 1000, User: "alice",
		Cmd: []string{"python", "train.py", "--tag", "a b"}, Dir: "/home/alice/exp",
		GPUs: []api.ProcessGPU{
			{Index: 0, UUID: "GPU-aaaa", UsedMiB: 12288, UtilPercent: intp(35)},
			{Index: 1, UUID: "GPU-bbbb", UsedMiB: 512},
		},
		VRAMMiB:   12800,
		Tier:      api.TierGPU,
		Log:       "/var/log/gpusched/" + name + ".log",
		CreatedAt: now.Add(-91 * time.Minute),
		StartedAt: now.Add(-90*time.Minute - 30*time.Second),
	}
}

// exited is name after it ended with exit.
func exited(name string, exit api.Exit) api.Process {
	p := proc(name)
	p.State = api.StateExited
	p.PID = 0
	p.GPUs = nil
	p.VRAMMiB = 0
	p.ExitedAt = time.Now().Add(-time.Minute)
	p.Exit = &exit
	p.Tier = ""
	return p
}

// job is a job named name running its second attempt on two GPUs, after a
// first one that ran out of memory raised its declaration.
func job(name string) api.Job {
	now := time.Now()
	first := now.Add(-2 * time.Hour)
	return api.Job{
		ID: "j-" + name, Name: name, State: api.JobRunning, User: "alice", UID: 1000,
		Cmd: []string{"/bin/sh", "-c", "python train.py --lr 3e-4"}, Dir: "/home/alice/exp",
		VRAM: api.VRAM{MiB: 18 << 10}, VRAMMiB: 22118, GPUs: 2, Priority: 5,
		Timeout: api.Duration(2 * time.Hour), Retries: 2, RetriesLeft: 1, Preemptible: true,
		SubmittedAt: now.Add(-3 * time.Hour), StartedAt: now.Add(-90 * time.Minute),
		Attempts: []api.Attempt{
			{N: 1, GPUs: []string{"GPU-aaaa", "GPU-bbbb"}, VRAMMiB: 18 << 10, StartedAt: first, EndedAt: first.Add(12 * time.Minute),
				Exit: &api.Exit{Code: intp(1)}, PeakMiB: map[string]uint64{"GPU-bbbb": 18 << 10, "GPU-aaaa": 18400}, OOM: true, Outcome: "oom"},
			{N: 2, GPUs: []string{"GPU-aaaa", "GPU-bbbb"}, VRAMMiB: 22118, StartedAt: now.Add(-90 * time.Minute),
				PeakMiB: map[string]uint64{"GPU-aaaa": 20480, "GPU-bbbb": 512}, Preempted: 1},
		},
		PeakMiB: map[string]uint64{"GPU-aaaa": 20480, "GPU-bbbb": 18 << 10},
		Process: name,
	}
}

// queuedJob is a job named name waiting for memory, with an auto
// declaration not yet resolved.
func queuedJob(name string) api.Job {
	return api.Job{
		ID: "j-" + name, Name: name, State: api.JobQueued, Reason: "waiting for 1 GPU with 18.0 GiB free",
		User: "alice", UID: 1000, Cmd: []string{"./eval.sh"}, Dir: "/home/alice/exp",
		VRAM: api.VRAM{Auto: true}, GPUs: 1, SubmittedAt: time.Now().Add(-45 * time.Second),
		Attempts: []api.Attempt{}, PeakMiB: map[string]uint64{},
	}
}

// endedJob is name after it ended in state with exit.
func endedJob(name string, state api.JobState, exit api.Exit) api.Job {
	j := job(name)
	j.State, j.Exit, j.EndedAt = state, &exit, time.Now().Add(-time.Minute)
	last := &j.Attempts[len(j.Attempts)-1]
	last.Exit, last.EndedAt, last.Outcome = &exit, j.EndedAt, string(state)
	j.Verdict = "declared 21.6 GiB, peak 20.0 GiB: fits"
	return j
}

// lease is a lease id holding 40 GiB on GPUs 0 and 1.
func lease(id string) api.Lease {
	return api.Lease{
		ID: id, GPUs: []api.LeaseGPU{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}},
		CUDAVisibleDevices: "GPU-aaaa,GPU-bbbb", MiB: 40 << 10, User: "alice",
		AcquiredAt: time.Now().Add(-5 * time.Minute),
	}
}
