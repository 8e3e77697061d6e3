package api

import "time"

// RunParams starts a managed process. Cmd is an argv; no shell is involved.
type RunParams struct {
	Name string            `json:"name"`
	Cmd  []string          `json:"cmd"`
	Dir  string            `json:"dir,omitempty"`  // absolute; default: the caller's cwd
	GPU  *GPURef           `json:"gpu,omitempty"`  // one GPU; shorthand for GPUs
	GPUs []GPURef          `json:"gpus,omitempty"` // default: every GPU
	Env  map[string]string `json:"env,omitempty"`  // the whole environment, plus GPUSCHED_*/CUDA_*
	Nice int               `json:"nice,omitempty"` // -20..19; below 0 needs root
	User string            `json:"user,omitempty"` // root only: run as this user
	// Disk-tier policy: see Policy.
	Priority int      `json:"priority,omitempty"`
	Pin      bool     `json:"pin,omitempty"`
	TTL      Duration `json:"ttl,omitempty"`
	Idle     Duration `json:"idle,omitempty"`
	// Filled attaches a filler to the process's GPU: total usage is held at
	// this ratio of its memory while the process frees and re-allocates.
	Filled float64 `json:"filled,omitempty"`
	// MPS: a share of the GPU's threads (percent) and a hard memory cap per
	// GPU (default: none for run). Needs the MPS tools.
	MPSThreads  int  `json:"mps_threads,omitempty"`
	MPSMemLimit VRAM `json:"mps_mem_limit,omitzero"`
}

// NameParams names one process.
type NameParams struct {
	Name string `json:"name"`
}

// StatusParams: without Name, status returns the overview (Status); with
// Name, that process (Process).
type StatusParams struct {
	Name string `json:"name,omitempty"`
}

// KillParams ends a process tree. Without Signal: SIGTERM to every process
// of the tree, then SIGKILL after Grace; the call returns once it exited.
// With Signal: that one signal to the tree, returning at once.
type KillParams struct {
	Name   string   `json:"name"`
	Signal string   `json:"signal,omitempty"`
	Grace  Duration `json:"grace,omitempty"`
}

// PSParams filters the process list.
type PSParams struct {
	User   string  `json:"user,omitempty"`   // only processes of this user
	States []State `json:"states,omitempty"` // only processes in one of these states
}

// RmParams forgets exited processes: one (Name, answered with its
// Process), several (Names), or every exited process of the caller
// (Exited; root: of every user, or of User), both answered with RmResult.
type RmParams struct {
	Name   string   `json:"name,omitempty"`
	Names  []string `json:"names,omitempty"`
	Exited bool     `json:"exited,omitempty"`
	User   string   `json:"user,omitempty"` // with Exited
}

// RmResult says what an rm of several names or of every exited process
// removed, by name, and what it could not, in the order asked.
type RmResult struct {
	Removed []Process   `json:"removed"`
	Failed  []RmFailure `json:"failed"`
}

// RmFailure is one name rm left as it was, and why.
type RmFailure struct {
	Name  string `json:"name"`
	Error string `json:"error"`
	Code  Code   `json:"code"`
}

// PSResult lists processes sorted by name.
type PSResult struct {
	Processes []Process `json:"processes"`
}

// LogsParams reads a process's log. Lines defaults to 100; -1 means all
// retained lines. Follow streams new lines as log events until the process
// exits (or the caller disconnects).
type LogsParams struct {
	Name   string `json:"name"`
	Lines  *int   `json:"lines,omitempty"`
	Follow bool   `json:"follow,omitempty"`
}

// LogsResult holds the last lines, oldest first. Truncated means that
// older lines asked for were left out: the daemon returns at most the last
// 65,536 lines and MiB of a log per call.
type LogsResult struct {
	Name      string   `json:"name"`
	Lines     []string `json:"lines"`
	Truncated bool     `json:"truncated,omitempty"`
}

// WaitParams waits until a process exits; Timeout 0 waits forever.
type WaitParams struct {
	Name    string   `json:"name"`
	Timeout Duration `json:"timeout,omitempty"`
}

// EventsParams subscribes to events, of one process when Name is set.
type EventsParams struct {
	Name string `json:"name,omitempty"`
}

// GPUsResult lists GPUs by index.
type GPUsResult struct {
	GPUs []GPU `json:"gpus"`
}

// FreezeParams parks a process's GPU memory in host RAM. LockTimeout bounds
// the wait for in-flight CUDA work (default: the daemon's --lock-timeout).
// Stop (default true) stops the tree with SIGSTOP once checkpointed.
type FreezeParams struct {
	Name        string   `json:"name"`
	LockTimeout Duration `json:"lock_timeout,omitempty"`
	Stop        *bool    `json:"stop,omitempty"`
}

// ThawParams brings a frozen process back onto its GPUs. When they lack room
// the thaw fails at once (resource_exhausted), or with Timeout set waits up
// to that long for memory to free (then timeout).
type ThawParams struct {
	Name    string   `json:"name"`
	Timeout Duration `json:"timeout,omitempty"`
}

// SwapParams freezes one process and thaws another, concurrently when both
// fit at once. Timeout is the thaw's admission wait.
type SwapParams struct {
	Freeze  string   `json:"freeze"`
	Thaw    string   `json:"thaw"`
	Timeout Duration `json:"timeout,omitempty"`
}

// MigrateParams moves a running or frozen process onto other GPUs: GPU for a
// process on one GPU, GPUs (one per current GPU, in order) otherwise. It
// ends running. Timeout is the admission wait on the new GPUs.
type MigrateParams struct {
	Name    string   `json:"name"`
	GPU     *GPURef  `json:"gpu,omitempty"`
	GPUs    []GPURef `json:"gpus,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// CheckpointResult reports a freeze, thaw or migrate: the CUDA processes of
// the tree it acted on, the GPU memory moved, and milliseconds per phase
// (freeze: lock, checkpoint, stop; thaw: admit, continue, restore, unlock;
// always total).
type CheckpointResult struct {
	Name   string             `json:"name"`
	Op     string             `json:"op"` // freeze, thaw or migrate
	State  State              `json:"state"`
	Driver string             `json:"driver"`
	PIDs   []int              `json:"pids"`
	Bytes  uint64             `json:"bytes"`
	GPUs   []string           `json:"gpus"` // UUIDs the process is on (thaw, migrate) or was on (freeze)
	MS     map[string]float64 `json:"ms"`
	// Snapshot is set when a thaw restored the process from disk.
	Snapshot string `json:"snapshot,omitempty"`
}

// SwapResult reports both halves of a swap.
type SwapResult struct {
	Freeze     CheckpointResult   `json:"freeze"`
	Thaw       CheckpointResult   `json:"thaw"`
	Concurrent bool               `json:"concurrent"`
	MS         map[string]float64 `json:"ms"`
}

// ActivateParams makes a process resident on its GPUs: thawed (from RAM or
// disk) when it is not running and, when it does not fit, room made by
// freezing the owner's processes on its GPUs. Evict nil: the owner's
// running processes on the target's GPUs (not job attempts, MPS clients or
// held processes), least recently active first; else only these, in this
// order (an empty list encodes as absent: to freeze nothing, thaw
// instead). Hold keeps the process held (never frozen to make room for
// another activation) until the connection ends. Timeout is the last
// thaw's admission wait, as thaw's.
type ActivateParams struct {
	Name    string   `json:"name"`
	Evict   []string `json:"evict,omitempty"`
	Hold    bool     `json:"hold,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// Activation is what an activation did. Was is the state before it
// (running: nothing was done); Thaw the thaw that brought it back
// (Snapshot set when from disk); Frozen the processes frozen to make room,
// in order. MS holds daemon-side milliseconds per step: thaw (every thaw
// attempt), freeze or swap, rollback, total.
type Activation struct {
	Name   string             `json:"name"`
	Was    State              `json:"was"`
	Thaw   *CheckpointResult  `json:"thaw,omitempty"`
	Frozen []CheckpointResult `json:"frozen"`
	Held   bool               `json:"held"`
	MS     map[string]float64 `json:"ms"`
}

// HibernateParams moves a running or frozen process to disk. A running one
// is frozen first (LockTimeout as for freeze). Full writes every page even
// when an earlier snapshot of the process could serve as parent.
type HibernateParams struct {
	Name        string   `json:"name"`
	LockTimeout Duration `json:"lock_timeout,omitempty"`
	Full        bool     `json:"full,omitempty"`
}

// HibernateResult reports a hibernate: the snapshot written, its parent
// when incremental, the image's size and what this dump wrote.
type HibernateResult struct {
	Name     string             `json:"name"`
	State    State              `json:"state"`
	Snapshot string             `json:"snapshot"`
	Parent   string             `json:"parent,omitempty"`
	Bytes    uint64             `json:"bytes"`     // this snapshot's own files on disk
	Written  uint64             `json:"written"`   // bytes this dump wrote
	Pages    uint64             `json:"pages"`     // memory pages in the image
	Reused   uint64             `json:"reused"`    // of those, pages left in the parent
	GPUBytes uint64             `json:"gpu_bytes"` // GPU memory inside the image (checkpointed first)
	MS       map[string]float64 `json:"ms"`
}

// ForkParams dumps a process, leaving it as it was, and restores Copies
// independent copies named NAME-1..NAME-N, each in its own PID namespace.
// GPUs, when given, places copy i on GPUs[i] (a process on one GPU);
// otherwise the copies use the source's GPUs.
type ForkParams struct {
	Name    string   `json:"name"`
	Copies  int      `json:"copies"`
	GPUs    []GPURef `json:"gpus,omitempty"`
	Timeout Duration `json:"timeout,omitempty"` // admission wait for each copy's GPU memory
}

// ForkResult lists the copies, running.
type ForkResult struct {
	Name   string             `json:"name"`
	Copies []Process          `json:"copies"`
	Bytes  uint64             `json:"bytes"` // the image's size
	MS     map[string]float64 `json:"ms"`
}

// SnapshotsParams filters the snapshot list.
type SnapshotsParams struct {
	Name string `json:"name,omitempty"` // only snapshots of this process
}

// Snapshot is one image directory under --snapshot-dir.
type Snapshot struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`       // the process it was taken of
	ProcessID  string    `json:"process_id"` // that process's record id
	User       string    `json:"user"`
	UID        uint32    `json:"uid"`
	Parent     string    `json:"parent,omitempty"`
	Holds      bool      `json:"holds"` // the hibernated process lives in it (or in a child of it)
	Bytes      uint64    `json:"bytes"`
	Written    uint64    `json:"written"`
	GPUs       []string  `json:"gpus"`
	VRAMMiB    uint64    `json:"vram_mib"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
}

// SnapshotsResult lists snapshots by creation time.
type SnapshotsResult struct {
	Snapshots []Snapshot `json:"snapshots"`
	Bytes     uint64     `json:"bytes"`  // all snapshots on disk
	Budget    uint64     `json:"budget"` // --disk-budget; 0 = unlimited
}

// DeleteSnapshotParams removes one snapshot. One a hibernated process
// lives in, or that another snapshot needs as parent, is refused (conflict).
type DeleteSnapshotParams struct {
	ID string `json:"id"`
}

// SetParams changes a live process's disk-tier policy; fields left out
// stay as they are.
type SetParams struct {
	Name     string    `json:"name"`
	Priority *int      `json:"priority,omitempty"`
	Pin      *bool     `json:"pin,omitempty"`
	TTL      *Duration `json:"ttl,omitempty"`
	Idle     *Duration `json:"idle,omitempty"`
}
