package api

import "time"

// State is where a managed process is in its lifecycle.
type State string

// Process states. docs/protocol.md draws the state machine.
const (
	StateStarting State = "starting" // init spawned, command not yet confirmed running
	StateRunning  State = "running"  // command running
	StateFreezing State = "freezing" // freeze in progress
	StateFrozen   State = "frozen"   // GPU memory parked in host RAM; tree stopped
	StateThawing  State = "thawing"  // thaw in progress
	StateLocked   State = "locked"   // CUDA locked or partly checkpointed: retry freeze or thaw
	StateFailed   State = "failed"   // the driver reports a failed checkpoint state
	StateExited   State = "exited"   // tree gone; Exit says how

	StateHibernating State = "hibernating" // being dumped to disk
	StateHibernated  State = "hibernated"  // on disk only; the tree is gone from memory
	StateRestoring   State = "restoring"   // being restored from disk (then thawed)
)

// States lists every process state.
var States = []State{StateStarting, StateRunning, StateFreezing, StateFrozen, StateThawing, StateLocked, StateFailed,
	StateHibernating, StateHibernated, StateRestoring, StateExited}

// Tier says where a live process's GPU memory is.
type Tier string

// Tiers.
const (
	TierGPU  Tier = "gpu"  // on its GPUs
	TierHost Tier = "host" // parked in host RAM by a freeze
	TierDisk Tier = "disk" // in a snapshot on disk by a hibernate
)

// Exit says how a managed process ended. Exactly one of Code, Signal or
// Unknown is set.
type Exit struct {
	Code    *int   `json:"code,omitempty"`    // exit status, when it exited by itself
	Signal  string `json:"signal,omitempty"`  // "SIGKILL", when a signal ended it
	Unknown bool   `json:"unknown,omitempty"` // ended while nobody could observe how
	Reason  string `json:"reason,omitempty"`  // why, when the daemon knows more than the status
}

// Identity is a caller or owner, as read from SO_PEERCRED.
type Identity struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	User   string   `json:"user"`
	PID    int      `json:"pid,omitempty"`
}

// ProcessGPU is one GPU visible to a managed process and the memory its
// whole process tree uses there.
type ProcessGPU struct {
	Index   int    `json:"index"`
	UUID    string `json:"uuid"`
	UsedMiB uint64 `json:"used_mib"`
	// UtilPercent is how busy the tree kept this GPU since the last
	// sample, its processes' own utilization summed (at most 100); absent
	// where the GPU cannot tell processes apart or the tree holds nothing
	// there.
	UtilPercent *int `json:"util_percent,omitempty"`
}

// Process is one managed process tree.
type Process struct {
	Name      string       `json:"name"`
	ID        string       `json:"id"`
	State     State        `json:"state"`
	PID       int          `json:"pid"`      // host pid of the command, 0 before it starts
	InitPID   int          `json:"init_pid"` // host pid of its PID namespace's init
	UID       uint32       `json:"uid"`
	GID       uint32       `json:"gid"`
	User      string       `json:"user"`
	Cmd       []string     `json:"cmd"`
	Dir       string       `json:"dir"`
	Nice      int          `json:"nice"`
	CPUs      string       `json:"cpus,omitempty"` // the CPUs it keeps of the process that asked for it (a CPU list); omitted: every CPU the daemon gives users
	GPUs      []ProcessGPU `json:"gpus"`
	VRAMMiB   uint64       `json:"vram_mib"`           // sum over GPUs
	Tier      Tier         `json:"tier,omitempty"`     // live processes only
	HostMiB   uint64       `json:"host_mib,omitempty"` // GPU memory parked in host RAM
	DiskMiB   uint64       `json:"disk_mib,omitempty"` // GPU memory hibernated into its snapshot, which a thaw needs back
	Log       string       `json:"log"`
	CreatedAt time.Time    `json:"created_at"`
	StartedAt time.Time    `json:"started_at,omitzero"`
	ExitedAt  time.Time    `json:"exited_at,omitzero"`
	FrozenAt  time.Time    `json:"frozen_at,omitzero"`
	Exit      *Exit        `json:"exit,omitempty"`
	Error     string       `json:"error,omitempty"` // why the last freeze or thaw failed
	Note      string       `json:"note,omitempty"`  // what a policy last did to it (eviction, ttl, idle), or mounts a restore left out
	Policy    Policy       `json:"policy"`
	Snapshot  string       `json:"snapshot,omitempty"` // the snapshot holding it (hibernated) or its next dump's parent
	Job       string       `json:"job,omitempty"`      // id of the queued job it is an attempt of
	// PreemptedBy is the job it was frozen to make room for; placement thaws
	// it once its memory fits again.
	PreemptedBy string `json:"preempted_by,omitempty"`
	// Filled is the ratio its attached filler holds its GPU at (run --filled).
	Filled      float64 `json:"filled,omitempty"`
	MPSThreads  int     `json:"mps_threads,omitempty"`
	MPSMemLimit uint64  `json:"mps_mem_limit_mib,omitempty"`
	// CmdTruncated says Cmd is cut, as listings cut it (ListCmdBytes):
	// everywhere but in status of the name and wait's result, which
	// return it whole.
	CmdTruncated bool `json:"cmd_truncated,omitempty"`
}

// Policy is how the disk tier treats a process: eviction order (lowest
// Priority first, then least recently frozen), Pin (never evicted), TTL
// (hibernated once frozen that long) and Idle (frozen once its GPUs have
// been idle that long). Zero durations are off.
type Policy struct {
	Priority int      `json:"priority"`
	Pin      bool     `json:"pin"`
	TTL      Duration `json:"ttl,omitempty"`
	Idle     Duration `json:"idle,omitempty"`
}

// GPUProcess is one process holding memory on a GPU, managed or not.
type GPUProcess struct {
	PID     int    `json:"pid"`
	UsedMiB uint64 `json:"used_mib"`
	// UtilPercent is how busy the process kept the GPU since the last
	// sample (its highest of SM, memory, encoder and decoder utilization);
	// absent where the GPU cannot tell processes apart.
	UtilPercent *int   `json:"util_percent,omitempty"`
	Managed     string `json:"managed,omitempty"` // managed process name, "" when external
}

// GPU is one device as the backend last sampled it.
type GPU struct {
	Index       int          `json:"index"`
	UUID        string       `json:"uuid"`
	Name        string       `json:"name"`
	TotalMiB    uint64       `json:"total_mib"`
	UsedMiB     uint64       `json:"used_mib"`
	FreeMiB     uint64       `json:"free_mib"`
	UtilPercent *int         `json:"util_percent,omitempty"`
	PowerWatts  *float64     `json:"power_watts,omitempty"`
	Processes   []GPUProcess `json:"processes"`
	// Health and the daemon's view of the GPU.
	PowerLimitWatts *float64 `json:"power_limit_watts,omitempty"`
	TempC           *int     `json:"temp_c,omitempty"`
	Driver          string   `json:"driver,omitempty"` // driver version
	Checkpoint      string   `json:"checkpoint"`       // checkpoint driver: api, cli, sim or none
	Healthy         bool     `json:"healthy"`          // passes the daemon's health thresholds
	Unhealthy       []string `json:"unhealthy"`        // why not, one sentence each; [] when healthy
	Filler          *Filler  `json:"filler,omitempty"`
	Leases          []string `json:"leases"`     // ids of leases holding it
	FrozenMiB       uint64   `json:"frozen_mib"` // memory of processes frozen off it, parked in host RAM
	// Error says why the GPU's data cannot be trusted: it is missing from
	// the driver's list, its queries fail, or GPU sampling fails as a
	// whole (the numbers are then the last good sample's); "" when fresh.
	Error string `json:"error,omitempty"`
	// DriverWarning is a known problem of the checkpoint driver's NVIDIA
	// driver version (as Hello.DriverWarning); "" when none.
	DriverWarning string `json:"driver_warning,omitempty"`
}

// GPUSummary is a GPU's memory at a glance, as status reports it.
type GPUSummary struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	TotalMiB uint64 `json:"total_mib"`
	UsedMiB  uint64 `json:"used_mib"`
	FreeMiB  uint64 `json:"free_mib"`
	Error    string `json:"error,omitempty"` // as GPU.Error
}

// Hello is the daemon's self-description.
type Hello struct {
	Protocol     int      `json:"protocol"`
	Version      string   `json:"version"`
	Backend      string   `json:"backend"` // "nvml" or "sim"
	Capabilities []string `json:"capabilities"`
	CRIU         string   `json:"criu"` // CRIU version behind the disk tier; "" when off
	Caller       Identity `json:"caller"`
	// DriverWarning is a known problem of the NVIDIA driver behind the
	// checkpoint driver, one sentence; "" when none.
	DriverWarning string `json:"driver_warning,omitempty"`
	// ExcludedGPUs says, one sentence each, which GPUs the daemon leaves
	// alone and why (a GPU in MIG mode); [] when none.
	ExcludedGPUs []string `json:"excluded_gpus"`
}

// Status is the daemon overview: what `status` without a name returns.
type Status struct {
	Version       string           `json:"version"`
	Protocol      int              `json:"protocol"`
	Backend       string           `json:"backend"`
	StartedAt     time.Time        `json:"started_at"`
	UptimeSeconds float64          `json:"uptime_seconds"`
	Processes     int              `json:"processes"` // visible to the caller
	States        map[State]int    `json:"states"`    // visible processes by state
	GPUs          []GPUSummary     `json:"gpus"`
	HostMiB       uint64           `json:"host_mib"`       // GPU memory parked in host RAM, all processes
	RAMBudgetMiB  uint64           `json:"ram_budget_mib"` // --ram-budget; 0 = unlimited
	Driver        string           `json:"driver"`         // checkpoint driver: api, cli, sim or none
	DiskBytes     uint64           `json:"disk_bytes"`     // snapshot images on disk, all processes
	DiskBudget    uint64           `json:"disk_budget"`    // --disk-budget in bytes; 0 = unlimited
	DiskFree      uint64           `json:"disk_free"`      // bytes free on the snapshot directory's filesystem; 0 when the disk tier is off
	DiskKeepFree  uint64           `json:"disk_keep_free"` // of them, what --disk-keep-free keeps from dumps; 0 = none
	CRIU          string           `json:"criu"`           // CRIU version, "" when the disk tier is off
	Jobs          map[JobState]int `json:"jobs"`           // visible jobs by state (finished ones included)
	Leases        int              `json:"leases"`         // visible leases held
	Fillers       []Filler         `json:"fillers"`        // every GPU's filler, by GPU index
	// CallerHostMiB is what the caller's own processes park in host RAM,
	// and RAMShareMiB the most they may beside other users' frozen
	// processes (--user-ram-fraction of --ram-budget); 0: no cap, as for
	// root.
	CallerHostMiB uint64 `json:"caller_host_mib,omitempty"`
	RAMShareMiB   uint64 `json:"ram_share_mib,omitempty"`
	// CallerDiskBytes is what the caller's snapshots take on disk, and
	// DiskShare the most they may (--user-disk-fraction); 0: no cap.
	CallerDiskBytes uint64 `json:"caller_disk_bytes,omitempty"`
	DiskShare       uint64 `json:"disk_share,omitempty"`
	// GPUError is the error of the last GPU sample when it failed: GPUs
	// then show the last good sample, and the queue places nothing.
	GPUError string `json:"gpu_error,omitempty"`
}

// EventType says what an Event reports.
type EventType string

// Event types.
const (
	EventSubscribed EventType = "subscribed" // first line of an events stream
	EventProcess    EventType = "process"    // a process changed state (or appeared)
	EventRemoved    EventType = "removed"    // a process was forgotten (rm, replaced)
	EventLog        EventType = "log"        // one log line of a followed process
	// EventJob: a job changed state; Job holds it. A job going past its
	// declaration is an EventJob with Warning set.
	EventJob EventType = "job"
	// EventJobRemoved: a finished job was removed (prune_jobs, retention);
	// Job holds its last state.
	EventJobRemoved EventType = "job_removed"
	// EventLease: a lease was granted or released; Lease holds it.
	EventLease EventType = "lease"
	// EventFiller: a filler started, changed target or was released; Filler
	// holds it (HeldMiB 0 and a released filler's last state on release).
	EventFiller EventType = "filler"
	// EventActivated: a held activation made its process resident;
	// Activation holds what it did. The hold lasts until the connection ends.
	EventActivated EventType = "activated"
)

// RemovedByRetention is the Reason of a removal by --keep-finished or
// --keep-finished-for.
const RemovedByRetention = "retention"

// Event is one streamed item.
type Event struct {
	Seq       uint64    `json:"seq,omitempty"`
	Time      time.Time `json:"time,omitzero"`
	Type      EventType `json:"type"`
	Name      string    `json:"name,omitempty"`
	State     State     `json:"state,omitempty"`
	PrevState State     `json:"prev_state,omitempty"`
	Process   *Process  `json:"process,omitempty"`
	Line      string    `json:"line,omitempty"`
	Job       *Job      `json:"job,omitempty"`
	JobState  JobState  `json:"job_state,omitempty"`
	Warning   string    `json:"warning,omitempty"` // e.g. a job exceeded its declared VRAM
	Lease     *Lease    `json:"lease,omitempty"`
	Filler    *Filler   `json:"filler,omitempty"`
	// Activation is what a held activation did (EventActivated).
	Activation *Activation `json:"activation,omitempty"`

	// Reason says why a record was removed when the daemon removed it by
	// itself: RemovedByRetention.
	Reason string `json:"reason,omitempty"`
}
