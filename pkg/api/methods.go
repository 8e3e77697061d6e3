package api

// Method names. docs/protocol.md documents each one.
const (
	MethodHello  = "hello"
	MethodRun    = "run"
	MethodKill   = "kill"
	MethodStatus = "status"
	MethodPS     = "ps"
	MethodLogs   = "logs"
	MethodWait   = "wait"
	MethodRm     = "rm"
	MethodEvents = "events"
	MethodGPUs   = "gpus"

	MethodFreeze  = "freeze"
	MethodThaw    = "thaw"
	MethodSwap    = "swap"
	MethodMigrate = "migrate"
	// MethodActivate makes a process resident, freezing its owner's least
	// recently active processes when it does not fit; optionally held.
	MethodActivate = "activate"

	MethodHibernate      = "hibernate"
	MethodFork           = "fork"
	MethodSnapshots      = "snapshots"
	MethodDeleteSnapshot = "delete_snapshot"
	MethodSet            = "set"

	MethodSubmit  = "submit"
	MethodJobs    = "jobs"
	MethodJob     = "job"
	MethodCancel  = "cancel"
	MethodJobWait = "job_wait"
	MethodAcquire = "acquire"
	MethodRelease = "release"
	MethodLeases  = "leases"

	MethodFill    = "fill"
	MethodUnfill  = "unfill"
	MethodFillers = "fillers"

	MethodPruneJobs = "prune_jobs" // remove finished jobs
)

// MethodAliases maps accepted alternative spellings to their method.
var MethodAliases = map[string]string{
	"version": MethodHello,
	"list":    MethodPS,
}

// Capabilities this protocol version offers; hello reports them.
const (
	CapRun      = "run"
	CapLogs     = "logs.follow"
	CapEvents   = "events"
	CapPIDNS    = "pidns"
	CapSimGPU   = "gpu.sim"
	CapNVML     = "gpu.nvml"
	CapPeerCred = "peercred"

	CapFreeze    = "freeze"         // freeze, thaw and swap
	CapMigrate   = "migrate"        // thaw onto other GPUs (driver device map)
	CapActivate  = "activate"       // activate (needs freeze)
	CapDriverAPI = "checkpoint.api" // checkpoint driver: libcuda helper process
	CapDriverCLI = "checkpoint.cli" // checkpoint driver: the cuda-checkpoint tool
	CapDriverSim = "checkpoint.sim" // checkpoint driver: simulated

	CapHibernate   = "hibernate"        // disk tier: hibernate, thaw from disk, snapshots
	CapFork        = "fork"             // N copies from one image
	CapIncremental = "criu.incremental" // repeat hibernates write only changed pages
	// How CUDA processes reach the disk tier: checkpointed into host
	// memory first, always; CapCUDAPlugin says CRIU's CUDA plugin is
	// installed, which CRIU runs without.
	CapCUDACheckpointed = "criu.cuda.checkpointed"
	CapCUDAPlugin       = "criu.cuda.plugin"

	CapQueue      = "queue"      // submit, jobs, job, cancel, job_wait
	CapPreemption = "preemption" // preemptible jobs frozen for higher priorities (needs freeze)
	CapLeases     = "leases"     // acquire, release, leases
	CapCPUWeight  = "cpu.weight" // each managed tree's cgroup v2 cpu.weight follows its nice
	CapFill       = "fill"       // fill, unfill, fillers; run --filled
)
