package jobqueue

import (
	"maps"
	"slices"
	"time"

	"github.com/gpusched/gpusched/internal/rlimit"
	"github.com/gpusched/gpusched/pkg/api"
)

// Owner is the user a job runs as.
type Owner struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	User   string   `json:"user"`
}

// Job is one queued job as persisted. Published jobs are never modified;
// Update hands its callback a deep copy.
type Job struct {
	ID          string            `json:"id"`
	Seq         uint64            `json:"seq"`
	Name        string            `json:"name"`
	Owner       Owner             `json:"owner"`
	Cmd         []string          `json:"cmd"`
	Dir         string            `json:"dir"`
	Env         map[string]string `json:"env"`
	VRAM        api.VRAM          `json:"vram"`     // as submitted
	VRAMMiB     uint64            `json:"vram_mib"` // current declaration per GPU; 0 = undeclared
	GPUs        int               `json:"gpus"`
	Priority    int               `json:"priority"`
	Timeout     time.Duration     `json:"timeout"`
	Retries     int               `json:"retries"`
	RetriesLeft int               `json:"retries_left"`
	Preemptible bool              `json:"preemptible"`
	State       api.JobState      `json:"state"`
	Reason      string            `json:"reason,omitempty"` // why it ended, or was requeued
	SubmittedAt time.Time         `json:"submitted_at"`
	EndedAt     time.Time         `json:"ended_at,omitzero"`
	Attempts    []api.Attempt     `json:"attempts"`
	// Proc is the process record id of the current attempt, set when the
	// attempt starts and kept after it ends.
	Proc string `json:"proc,omitempty"`
	// Ending is what the daemon asked of the current attempt's end:
	// cancelled or timed_out; empty while nobody asked it to end.
	Ending api.JobState `json:"ending,omitempty"`
	// PreemptedAt is when the current attempt was last frozen by
	// preemption; zero while it runs.
	PreemptedAt time.Time `json:"preempted_at,omitzero"`
	Verdict     string    `json:"verdict,omitempty"`
	Rev         uint64    `json:"rev"`

	// Nice is the CPU nice value of every thread of each attempt.
	Nice int `json:"nice,omitempty"`
	// MPSThreads (percent of a GPU's threads) and MPSMemLimitMiB (a cap
	// per GPU) make each attempt an NVIDIA MPS client; see MPS.
	MPSThreads     int    `json:"mps_threads,omitempty"`
	MPSMemLimitMiB uint64 `json:"mps_mem_limit_mib,omitempty"` // 0: its declaration
	// Rlimits are the resource limits of the process that submitted the
	// job, which every attempt runs under; nil: the daemon's own.
	Rlimits rlimit.Set `json:"rlimits,omitempty"`
	// OOMScoreAdj is the oom_score_adj of the process that submitted the
	// job, every attempt's.
	OOMScoreAdj int `json:"oom_score_adj,omitempty"`
	// CPUs are those of the process that submitted the job, where they
	// are fewer than the daemon gives users: every attempt runs on them;
	// "": on all of those.
	CPUs string `json:"cpus,omitempty"`

	// Apart says the job finished with more than keptBytes of command and
	// environment: it keeps its command cut (CmdTruncated says whether
	// anything was) and no environment; the queue keeps both whole
	// (Command).
	Apart        bool `json:"apart,omitempty"`
	CmdTruncated bool `json:"cmd_truncated,omitempty"`
}

// Active reports whether the job has a current attempt (a process that is
// starting, running or preempted).
func (j *Job) Active() bool {
	return j.State == api.JobStarting || j.State == api.JobRunning || j.State == api.JobPreempted
}

// MPS reports whether the job's attempts run as NVIDIA MPS clients: it
// asked for a thread share or a memory limit.
func (j *Job) MPS() bool { return j.MPSThreads > 0 || j.MPSMemLimitMiB > 0 }

// MPSLimitMiB is the MPS memory limit per GPU of the next attempt: the one
// asked for, else the current declaration (which an out-of-memory retry
// raises). 0 means none: not an MPS client, or an undeclared job without an
// explicit limit.
func (j *Job) MPSLimitMiB() uint64 {
	switch {
	case !j.MPS():
		return 0
	case j.MPSMemLimitMiB > 0:
		return j.MPSMemLimitMiB
	}
	return j.VRAMMiB
}

// Current is the current (last) attempt, nil before the first.
func (j *Job) Current() *api.Attempt {
	if len(j.Attempts) == 0 {
		return nil
	}
	return &j.Attempts[len(j.Attempts)-1]
}

// Peak is the highest memory per GPU over all attempts.
func (j *Job) Peak() map[string]uint64 {
	out := map[string]uint64{}
	for _, a := range j.Attempts {
		for uuid, mib := range a.PeakMiB {
			out[uuid] = max(out[uuid], mib)
		}
	}
	return out
}

// clone returns a deep copy.
func (j *Job) clone() *Job {
	c := *j
	c.Owner.Groups = slices.Clone(j.Owner.Groups)
	c.Cmd = slices.Clone(j.Cmd)
	c.Env = maps.Clone(j.Env)
	c.Rlimits = maps.Clone(j.Rlimits)
	c.Attempts = make([]api.Attempt, len(j.Attempts))
	for i, a := range j.Attempts {
		a.GPUs = slices.Clone(a.GPUs)
		a.PeakMiB = maps.Clone(a.PeakMiB)
		if a.Exit != nil {
			e := *a.Exit
			if e.Code != nil {
				code := *e.Code
				e.Code = &code
			}
			a.Exit = &e
		}
		c.Attempts[i] = a
	}
	return &c
}

// MaxPeak is the highest per-GPU value of peaks (0 for none).
func MaxPeak(peaks map[string]uint64) uint64 {
	var m uint64
	for _, v := range peaks {
		m = max(m, v)
	}
	return m
}
