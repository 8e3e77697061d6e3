package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JobState is where a queued job is in its life.
type JobState string

// Job states. queued -> starting -> running -> (done | failed | timed_out |
// cancelled); running -> preempted -> running when frozen to make room for a
// higher-priority job and thawed back; running -> queued when an attempt
// ran out of memory and retries remain; queued -> infeasible when it can
// never fit on this machine.
const (
	JobQueued     JobState = "queued"
	JobStarting   JobState = "starting"
	JobRunning    JobState = "running"
	JobPreempted  JobState = "preempted"
	JobDone       JobState = "done"      // exited 0
	JobFailed     JobState = "failed"    // exited non-zero or by a signal
	JobTimedOut   JobState = "timed_out" // ran past its timeout and was ended
	JobCancelled  JobState = "cancelled"
	JobInfeasible JobState = "infeasible"
)

// JobStates lists every job state.
var JobStates = []JobState{JobQueued, JobStarting, JobRunning, JobPreempted, JobDone, JobFailed, JobTimedOut, JobCancelled, JobInfeasible}

// Terminal reports whether s is final.
func (s JobState) Terminal() bool {
	switch s {
	case JobDone, JobFailed, JobTimedOut, JobCancelled, JobInfeasible:
		return true
	}
	return false
}

// VRAM is a job's declared memory per GPU: a size ("18G", "512MiB", or a
// number of MiB), "auto" (the peak remembered from earlier runs of the same
// command), or empty (undeclared: whole idle GPUs).
type VRAM struct {
	MiB  uint64
	Auto bool
}

// ParseVRAM reads "", "auto" or a size.
func ParseVRAM(s string) (VRAM, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return VRAM{}, nil
	case "auto":
		return VRAM{Auto: true}, nil
	}
	n, err := ParseMiB(s)
	if errors.As(err, new(noUnitError)) {
		return VRAM{}, fmt.Errorf("vram: %w", err)
	}
	if err != nil {
		return VRAM{}, fmt.Errorf("vram: %w (or \"auto\")", err)
	}
	if n == 0 {
		return VRAM{}, fmt.Errorf("vram %q: must be more than 0 (leave it out for undeclared)", s)
	}
	return VRAM{MiB: n}, nil
}

func (v VRAM) String() string {
	switch {
	case v.Auto:
		return "auto"
	case v.MiB == 0:
		return ""
	case v.MiB%1024 == 0:
		return strconv.FormatUint(v.MiB>>10, 10) + "G"
	}
	return strconv.FormatUint(v.MiB, 10) + "M"
}

// MarshalJSON writes MiB as a number, "auto" as a string, undeclared as null.
func (v VRAM) MarshalJSON() ([]byte, error) {
	switch {
	case v.Auto:
		return []byte(`"auto"`), nil
	case v.MiB == 0:
		return []byte("null"), nil
	}
	return []byte(strconv.FormatUint(v.MiB, 10)), nil
}

// UnmarshalJSON accepts a number of MiB, a size string, "auto" or null.
func (v *VRAM) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*v = VRAM{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		r, err := ParseVRAM(s)
		if err != nil {
			return err
		}
		*v = r
		return nil
	}
	var n uint64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("vram must be MiB, a size like \"18G\" or \"auto\", got %s", b)
	}
	if n == 0 {
		return fmt.Errorf("vram 0: must be more than 0 (leave it out for undeclared)")
	}
	*v = VRAM{MiB: n}
	return nil
}

// JobSpec is one job to queue. Cmd is an argv (a jobs file's line becomes
// ["/bin/sh", "-c", line]).
type JobSpec struct {
	Name        string            `json:"name,omitempty"` // default "job-<seq>"
	Cmd         []string          `json:"cmd"`
	Dir         string            `json:"dir,omitempty"` // default: the caller's cwd
	Env         map[string]string `json:"env,omitempty"`
	VRAM        VRAM              `json:"vram,omitzero"`
	GPUs        int               `json:"gpus,omitempty"` // default 1
	Priority    int               `json:"priority,omitempty"`
	Timeout     Duration          `json:"timeout,omitempty"` // per attempt; 0 = none
	Retries     int               `json:"retries,omitempty"` // out-of-memory retries
	Preemptible bool              `json:"preemptible,omitempty"`
	User        string            `json:"user,omitempty"` // root only
	Nice        int               `json:"nice,omitempty"` // CPU nice of every thread, -20..19 (below 0: root)
	// MPS: a share of the GPU's threads (percent) and a hard memory cap per
	// GPU (default: the declared VRAM). Needs the MPS tools.
	MPSThreads  int  `json:"mps_threads,omitempty"`
	MPSMemLimit VRAM `json:"mps_mem_limit,omitzero"`
}

// SubmitParams queues one job (the JobSpec fields inline) or, with Jobs,
// several: all of them, or none when any is invalid. With Jobs, the inline
// Env and Dir are the defaults of the jobs that give none.
type SubmitParams struct {
	JobSpec
	Jobs []JobSpec `json:"jobs,omitempty"`
}

// SubmitResult lists the queued jobs in submission order.
type SubmitResult struct {
	Jobs []Job `json:"jobs"`
}

// JobsFinished, in a jobs states filter, stands for every final state.
const JobsFinished JobState = "finished"

// JobsParams filters the job list.
type JobsParams struct {
	State  JobState   `json:"state,omitempty"`  // only jobs in this state
	States []JobState `json:"states,omitempty"` // only jobs in one of these states (or JobsFinished)
	All    bool       `json:"all,omitempty"`    // include finished jobs (default: only unfinished)
	User   string     `json:"user,omitempty"`
	// Recent adds to the unfinished jobs those that finished within it
	// (not with State, States or All).
	Recent Duration `json:"recent,omitempty"`
}

// PruneJobsParams removes the caller's finished jobs (root: every user's,
// or User's). The result is a JobsResult of the jobs removed.
type PruneJobsParams struct {
	User string `json:"user,omitempty"`
}

// JobsResult lists jobs in submission order.
type JobsResult struct {
	Jobs []Job `json:"jobs"`
}

// JobParams names one job, by name or id.
type JobParams struct {
	Name string `json:"name"`
}

// JobWaitParams waits until a job is finished; Timeout 0 waits forever.
type JobWaitParams struct {
	Name    string   `json:"name"`
	Timeout Duration `json:"timeout,omitempty"`
}

// Job is one queued job with its attempts.
type Job struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	State       JobState          `json:"state"`
	Reason      string            `json:"reason,omitempty"` // why it waits, or why it ended as it did
	User        string            `json:"user"`
	UID         uint32            `json:"uid"`
	Cmd         []string          `json:"cmd"`
	Dir         string            `json:"dir"`
	VRAM        VRAM              `json:"vram"`     // as submitted
	VRAMMiB     uint64            `json:"vram_mib"` // current declaration per GPU (auto resolved, raised after OOM); 0 = undeclared
	GPUs        int               `json:"gpus"`     // count
	Priority    int               `json:"priority"`
	Timeout     Duration          `json:"timeout,omitempty"`
	Retries     int               `json:"retries"` // OOM retries allowed
	RetriesLeft int               `json:"retries_left"`
	Preemptible bool              `json:"preemptible"`
	SubmittedAt time.Time         `json:"submitted_at"`
	StartedAt   time.Time         `json:"started_at,omitzero"` // of the current or last attempt
	EndedAt     time.Time         `json:"ended_at,omitzero"`
	Exit        *Exit             `json:"exit,omitempty"` // of the last attempt
	Attempts    []Attempt         `json:"attempts"`
	PeakMiB     map[string]uint64 `json:"peak_mib"`          // highest per GPU UUID over all attempts
	Verdict     string            `json:"verdict,omitempty"` // declared vs actual, at completion
	Process     string            `json:"process,omitempty"` // its managed process's name (the job's name)
	Nice        int               `json:"nice,omitempty"`
	CPUs        string            `json:"cpus,omitempty"` // as Process.CPUs, of the process that submitted it
	MPSThreads  int               `json:"mps_threads,omitempty"`
	MPSMemLimit uint64            `json:"mps_mem_limit_mib,omitempty"`
	// CmdTruncated says Cmd is cut, as listings cut it (ListCmdBytes);
	// job of the name or id returns it whole.
	CmdTruncated bool `json:"cmd_truncated,omitempty"`
}

// Attempt is one run of a job.
type Attempt struct {
	N         int               `json:"n"`
	GPUs      []string          `json:"gpus"`     // UUIDs
	VRAMMiB   uint64            `json:"vram_mib"` // declaration it ran with
	StartedAt time.Time         `json:"started_at"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	Exit      *Exit             `json:"exit,omitempty"`
	PeakMiB   map[string]uint64 `json:"peak_mib"`
	OOM       bool              `json:"oom,omitempty"`       // its log ended with an out-of-memory error
	Preempted int               `json:"preempted,omitempty"` // times frozen to make room
	// PreemptedFor is the time spent frozen by preemption, which the
	// timeout does not count.
	PreemptedFor Duration `json:"preempted_for,omitempty"`
	Outcome      string   `json:"outcome,omitempty"` // done, failed, oom (retried), timed_out, cancelled, lost
}

// AcquireParams asks for a lease on GPUs that meet the thresholds, waiting
// up to Timeout (0: answer at once). The lease holds until release or
// until the connection that acquired it closes.
type AcquireParams struct {
	GPUs     int      `json:"gpus,omitempty"`     // default 1
	MinFree  VRAM     `json:"min_free,omitzero"`  // held on each GPU; empty: whole idle GPUs
	MaxUtil  int      `json:"max_util,omitempty"` // percent
	MaxPower float64  `json:"max_power,omitempty"`
	MaxTemp  int      `json:"max_temp,omitempty"` // degrees C
	GPUIDs   []GPURef `json:"gpu_ids,omitempty"`  // choose only among these
	Timeout  Duration `json:"timeout,omitempty"`
	Priority int      `json:"priority,omitempty"`
}

// Lease is a granted GPU lease.
type Lease struct {
	ID                 string     `json:"id"`
	GPUs               []LeaseGPU `json:"gpus"`
	CUDAVisibleDevices string     `json:"cuda_visible_devices"`
	MiB                uint64     `json:"mib"` // held per GPU; 0 = the whole GPU
	User               string     `json:"user"`
	UID                uint32     `json:"uid"`
	AcquiredAt         time.Time  `json:"acquired_at"`
	ExpiresAt          time.Time  `json:"expires_at,omitzero"`  // when --user-lease-max-hold releases it; absent: never
	ReleasedAt         time.Time  `json:"released_at,omitzero"` // set in the event of its release
}

// LeaseGPU is one leased GPU.
type LeaseGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
}

// ReleaseParams ends a lease.
type ReleaseParams struct {
	ID string `json:"id"`
}

// LeasesResult lists the leases the caller may see.
type LeasesResult struct {
	Leases []Lease `json:"leases"`
}
