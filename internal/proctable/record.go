package proctable

import (
	"maps"
	"slices"
	"time"

	"github.com/gpusched/gpusched/internal/rlimit"
	"github.com/gpusched/gpusched/pkg/api"
)

// Owner is the user a process runs as.
type Owner struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	User   string   `json:"user"`
}

// Record is one managed process as persisted. Published records are never
// modified; Update hands its callback a deep copy.
type Record struct {
	ID    string   `json:"id"`
	Name  string   `json:"name"`
	Owner Owner    `json:"owner"`
	Cmd   []string `json:"cmd"`
	// CmdTruncated says Cmd is cut at KeptCmdBytes; the table keeps the
	// whole command apart (Table.Command).
	CmdTruncated bool      `json:"cmd_truncated,omitempty"`
	Dir          string    `json:"dir"`
	GPUs         []string  `json:"gpus"` // UUIDs, in CUDA_VISIBLE_DEVICES order
	Nice         int       `json:"nice"`
	State        api.State `json:"state"`
	InitPID      int       `json:"init_pid"`
	InitStart    uint64    `json:"init_start"`
	PID          int       `json:"pid"`
	PIDStart     uint64    `json:"pid_start"`
	BootID       string    `json:"boot_id"`
	LogPath      string    `json:"log_path"`
	StatusPath   string    `json:"status_path"`
	CreatedAt    time.Time `json:"created_at"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	ExitedAt     time.Time `json:"exited_at,omitzero"`
	Exit         *api.Exit `json:"exit,omitempty"`
	// Checkpoint is set from the start of a freeze until a thaw completes.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Restored is set once the checkpoint driver restored the tree's CUDA
	// state (a thaw, a migrate, a fork copy): its contexts are restored
	// ones from then on (see the daemon's kill).
	Restored bool `json:"restored,omitempty"`
	// Error says why the last freeze or thaw failed; cleared by the next.
	Error string `json:"error,omitempty"`
	// Note says what a policy last did to the process by itself (an
	// eviction, a TTL, an idle freeze); cleared by the next call.
	Note string `json:"note,omitempty"`
	// Snapshot is the snapshot the process lives in while hibernated, and
	// after a thaw from disk the parent of its next (incremental) dump.
	Snapshot string     `json:"snapshot,omitempty"`
	Policy   api.Policy `json:"policy"`
	// Job is the id of the queued job this process is an attempt of.
	Job string `json:"job,omitempty"`
	// PreemptedBy is the job whose room a preemption freeze made; set while
	// the process waits to be thawed back by placement.
	PreemptedBy string `json:"preempted_by,omitempty"`
	// Filled is the ratio of its GPU an attached filler holds (run --filled).
	Filled float64 `json:"filled,omitempty"`
	Rev    uint64  `json:"rev"` // bumped on every write

	// MPSThreads (percent of each GPU's threads) and MPSMemLimitMiB (a cap
	// per GPU) are set when the process runs as an NVIDIA MPS client; see
	// MPSClient.
	MPSThreads     int    `json:"mps_threads,omitempty"`
	MPSMemLimitMiB uint64 `json:"mps_mem_limit_mib,omitempty"`

	// Rlimits are the resource limits of the process that asked for this
	// one (run, or a job's submission), in force on its command; nil: the
	// daemon's own. A copy restored from disk has those its image holds.
	Rlimits rlimit.Set `json:"rlimits,omitempty"`
	// OOMScoreAdj is the oom_score_adj of the process that asked for this
	// one, its command's and, restored from disk, its tree's where the
	// image holds none (0: CRIU restores only other values).
	OOMScoreAdj int `json:"oom_score_adj,omitempty"`
	// CPUs are those of the process that asked for this one, where they
	// are fewer than the daemon gives users (cpuaffinity.Caller): the
	// tree runs on them, and so do the CRIU workers and helpers that dump
	// and restore it; "": every CPU the daemon gives users.
	CPUs string `json:"cpus,omitempty"`
	// Cgroup is the tree's cgroup in its owner's own delegated cgroup; ""
	// when it runs in the daemon's.
	Cgroup string `json:"cgroup,omitempty"`
}

// MPSClient reports whether the process was started as an NVIDIA MPS
// client, which CUDA checkpoint cannot freeze.
func (r Record) MPSClient() bool { return r.MPSThreads > 0 || r.MPSMemLimitMiB > 0 }

// Checkpoint is what a freeze acted on: each CUDA process of the tree with
// the GPU memory it held, so a thaw (maybe after a daemon restart) knows
// what to restore and how much room it needs.
type Checkpoint struct {
	Procs    []CheckpointProc `json:"procs"`
	Stopped  []ProcRef        `json:"stopped,omitempty"` // what the freeze stopped with SIGSTOP
	FrozenAt time.Time        `json:"frozen_at,omitzero"`
	// Unrestorable says why the driver can no longer restore the tree's
	// GPU state (a restore ran out of memory); "" while it can.
	Unrestorable string `json:"unrestorable,omitempty"`
}

// ProcRef names one process by pid and start time, so that a reused pid is
// never mistaken for it.
type ProcRef struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// CheckpointProc is one CUDA process of a frozen tree.
type CheckpointProc struct {
	PID   int               `json:"pid"`
	Start uint64            `json:"start"`
	VRAM  map[string]uint64 `json:"vram"` // MiB per GPU UUID at freeze
	// NSPID is its pid inside the tree's PID namespace, recorded by a
	// hibernate: a restore gives new host pids but keeps these.
	NSPID int `json:"ns_pid,omitempty"`
}

// VRAM sums the checkpointed memory per GPU UUID (none for a nil c).
func (c *Checkpoint) VRAM() map[string]uint64 {
	out := map[string]uint64{}
	if c == nil {
		return out
	}
	for _, p := range c.Procs {
		for uuid, mib := range p.VRAM {
			out[uuid] += mib
		}
	}
	return out
}

// MiB is the checkpointed memory in all (0 for a nil c).
func (c *Checkpoint) MiB() uint64 {
	var sum uint64
	if c == nil {
		return 0
	}
	for _, p := range c.Procs {
		for _, mib := range p.VRAM {
			sum += mib
		}
	}
	return sum
}

// Clone returns a deep copy.
func (r Record) Clone() Record {
	r.Owner.Groups = slices.Clone(r.Owner.Groups)
	r.Cmd = slices.Clone(r.Cmd)
	r.GPUs = slices.Clone(r.GPUs)
	r.Rlimits = maps.Clone(r.Rlimits)
	if r.Exit != nil {
		e := *r.Exit
		if e.Code != nil {
			c := *e.Code
			e.Code = &c
		}
		r.Exit = &e
	}
	if r.Checkpoint != nil {
		c := *r.Checkpoint
		c.Procs = make([]CheckpointProc, len(r.Checkpoint.Procs))
		for i, p := range r.Checkpoint.Procs {
			p.VRAM = maps.Clone(p.VRAM)
			c.Procs[i] = p
		}
		c.Stopped = slices.Clone(r.Checkpoint.Stopped)
		r.Checkpoint = &c
	}
	return r
}

// Live reports whether the record's tree may still exist.
func (r Record) Live() bool { return r.State != api.StateExited }

// InHostRAM reports whether the record's GPU memory is parked in host RAM:
// a live tree with a checkpoint that is not on disk.
func (r Record) InHostRAM() bool {
	return r.Live() && r.State != api.StateHibernated && r.Checkpoint != nil
}
