package placement

import "time"

// Snapshot is everything one placement pass looks at. It is immutable for
// the pass: Place never modifies it or anything it points to.
type Snapshot struct {
	Now     time.Time // the pass's clock, for aging; Place reads no other
	GPUs    []GPU     // any order; Place sorts by Index
	Options Options
	// Served is what each owner (by Job.Owner) has been given already, for
	// the round-robin between owners; an owner not in it has nothing.
	Served map[string]Served
}

// Served is what one owner has been given: Running requests placed before
// (jobs, leases) put the owner's first queued job in round Running, and
// within a round the owner started least recently (Last; zero: never)
// goes first.
type Served struct {
	Running int
	Last    time.Time
}

// GPU is one device with what occupies it.
type GPU struct {
	Index       int
	UUID        string
	TotalMiB    uint64
	UsedMiB     uint64   // as sampled: every process, managed or not
	UtilPercent *int     // nil when unknown (health filters then pass)
	PowerWatts  *float64 // nil when unknown
	TempC       *int     // degrees C; nil when unknown
	Occupants   []Occupant
}

// OccupantKind says what holds memory on a GPU and so how it is charged.
type OccupantKind string

// Occupant kinds.
const (
	// Managed is a managed process or job running on the GPU. A declared
	// one (DeclaredMiB > 0) is charged its declaration from launch on (a
	// just-launched job holds it before it has allocated anything) and
	// PeakMiB x (1 + SpikeBuffer) once its peak exceeds the declaration. An
	// undeclared job (Exclusive) holds the whole GPU. Other undeclared
	// managed processes are charged like External ones.
	Managed OccupantKind = "managed"
	// External is a process the daemon does not manage, charged at its
	// PeakMiB x (1 + SpikeBuffer) until it exits.
	External OccupantKind = "external"
	// Reservation is memory promised to something about to allocate it (a
	// thaw in progress); charged DeclaredMiB.
	Reservation OccupantKind = "reservation"
	// Filler is a memory-reservation filler, charged UsedMiB to other
	// owners' jobs. To its Owner's jobs it is free memory: it hands over
	// what they need before they start.
	Filler OccupantKind = "filler"
	// Lease is a GPU lease: DeclaredMiB when given, else (or when
	// Exclusive) the whole GPU.
	Lease OccupantKind = "lease"
	// Frozen is a process frozen off the GPU: charged nothing, listed so
	// that explanations can name it.
	Frozen OccupantKind = "frozen"
)

// Occupant is one holder of memory on one GPU. A process on several GPUs
// appears once on each, with the same ID (and the same Priority and
// Preemptible); preempting it frees all of them.
type Occupant struct {
	Kind        OccupantKind
	ID          string // record, job, lease or pid; unique per GPU
	Name        string // for explanations
	UsedMiB     uint64 // observed on this GPU now
	PeakMiB     uint64 // highest observed on this GPU
	DeclaredMiB uint64 // declared budget on this GPU; 0 = undeclared
	Exclusive   bool   // holds the whole GPU (undeclared job, lease without an amount)
	Permanent   bool   // never goes away by itself (a standalone filler, a configured reserve): counts for feasibility
	Priority    int
	Preemptible bool   // may be frozen to make room for a higher-priority job
	Owner       string // user; only its own jobs, or a PreemptAny job, may preempt it
}

// Options are the pass's rules and health filters. The zero value of a
// filter turns it off; Margin and SpikeBuffer should come from
// DefaultOptions.
type Options struct {
	MarginMiB   uint64  // headroom a job needs beyond its declaration (default 512)
	SpikeBuffer float64 // fraction added to observed peaks (default 0.1)
	// AgingStep raises a waiting job's effective priority by one for every
	// step it has waited (default 10 minutes; 0 = no aging).
	AgingStep time.Duration
	// StarveAfter: a job blocked this long reserves the GPUs it waits for,
	// so that smaller jobs stop backfilling them (default 30 minutes; 0 =
	// never).
	StarveAfter time.Duration
	// Health filters applied to every job.
	MinFreeMiB     uint64   // a GPU with less free (sampled) memory is skipped
	MaxUtilPercent int      // a GPU busier than this is skipped (0 = off)
	MaxPowerWatts  float64  // a GPU drawing more is skipped (0 = off)
	MaxTempC       int      // a GPU hotter than this, degrees C, is skipped (0 = off)
	Banned         []string // UUIDs never placed on
}

// DefaultOptions are the documented defaults.
func DefaultOptions() Options {
	return Options{MarginMiB: 512, SpikeBuffer: 0.1, AgingStep: 10 * time.Minute, StarveAfter: 30 * time.Minute}
}

// Job is one request to place: a queued job, a lease being acquired, or a
// preempted process waiting to be thawed.
type Job struct {
	ID       string
	Owner    string // user, for round-robin between users
	Priority int
	Seq      uint64    // submission order; unique
	QueuedAt time.Time // for aging and starvation
	GPUs     int       // distinct GPUs wanted (>= 1)
	VRAMMiB  uint64    // per GPU; 0 = undeclared: whole idle GPUs
	// Only, when set, restricts the job to these GPU UUIDs; with Pinned it
	// must have exactly these (a frozen process thaws where it was).
	Only   []string
	Pinned bool
	// PreemptAny lets the job preempt other users' processes (root's
	// jobs); other jobs preempt only processes of their own Owner.
	PreemptAny bool
	// Per-job health filters on top of Options (a lease's thresholds).
	MinFreeMiB     uint64
	MaxUtilPercent int
	MaxPowerWatts  float64
	MaxTempC       int
}

// Reason says why a job does not start in this pass.
type Reason string

// Reasons, from the most to the least permanent.
const (
	ReasonInfeasible Reason = "infeasible"  // can never fit on this machine
	ReasonNoMemory   Reason = "no_memory"   // not enough headroom on enough GPUs now
	ReasonNoIdleGPU  Reason = "no_idle_gpu" // undeclared: not enough whole idle GPUs
	ReasonUnhealthy  Reason = "unhealthy"   // enough memory only on GPUs the health filters (banned included) skip
	ReasonReserved   Reason = "reserved"    // the room is held for an older, starving job
)

// Start is a job to start now on GPUs (UUIDs, best fit first: least
// headroom first), after freezing the Preempt occupants (IDs, sorted; nil
// when none).
type Start struct {
	JobID   string
	GPUs    []string
	Preempt []string
}

// Wait is a job that does not start, with why in words.
type Wait struct {
	JobID  string
	Reason Reason
	Detail string // e.g. "needs 20480+512 MiB on 2 GPUs; most headroom: GPU 0 30000 MiB, GPU 1 9000 MiB"
}

// Plan is the outcome of one pass: every job is in exactly one of Starts,
// Waits and Infeasible, each in placement order. The lists are never nil.
// Reserved maps each GPU (UUID) held for a starving job to that job's ID
// (nil when none is held).
type Plan struct {
	Starts     []Start
	Waits      []Wait
	Infeasible []Wait
	Reserved   map[string]string
}
