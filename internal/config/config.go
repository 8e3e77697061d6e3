package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/cpuslice"
	"github.com/gpusched/gpusched/internal/rtprio"
	"github.com/gpusched/gpusched/pkg/api"
)

// SchemaVersion is the version of this configuration's shape.
const SchemaVersion = 1

// Config is everything the daemon can be told at start.
type Config struct {
	Version     int           // SchemaVersion
	Socket      string        // unix socket path
	Group       string        // group owning the socket (mode 0660); "" = root's group
	MaxConns    int           // concurrent client connections; more are refused with unavailable
	StateDir    string        // persisted records (0700)
	LogDir      string        // per-process logs
	Sim         string        // "" = NVML; "N" or "NxSIZE[:mig=I,...][:reserved=SIZE][:context=SIZE]" simulated GPUs
	SimDir      string        // shared simulated-GPU state; default <socket dir>/sim
	KillGrace   time.Duration // TERM -> KILL grace of kill
	LogMaxBytes int64         // per-process log cap before rotation
	LogKeep     int           // rotated log files kept
	GPUPoll     time.Duration // GPU sampling interval
	CPUSlice    time.Duration // scheduler slice asked for the daemon's own threads (Linux 6.12+); 0 = the kernel's default
	DaemonCPUs  string        // CPU list the daemon's own threads run on ("0-1"); "" = wherever the kernel lets them
	DaemonTasks int           // tasks of the daemon's cgroup the managed trees in it may not take; 0 = no such reserve

	RealtimePriority int     // SCHED_FIFO priority of the daemon's own threads, 1..99; 0 = the fair class, at CPUSlice
	RealtimeCPU      float64 // CPUs the daemon may use at real time, on average; past it its threads run in the fair class
	InitPath         string  // binary re-executed as each PID namespace's init; default: this executable
	LogLevel         string  // debug, info, warn, error
	LogFormat        string  // json or console

	CheckpointDriver  string        // auto, api, cli, sim or none
	CudaCheckpoint    string        // cuda-checkpoint binary; "" = found on PATH
	Libcuda           string        // CUDA driver library for the api driver; "" = libcuda.so.1
	LockTimeout       time.Duration // default wait for a CUDA lock on freeze
	CheckpointTimeout time.Duration // deadline of every other checkpoint driver call
	FreezeStop        bool          // SIGSTOP a tree once checkpointed
	RAMBudgetMiB      uint64        // host RAM frozen processes may hold; 0 = unlimited
	ThawMarginMiB     uint64        // free GPU memory a thaw leaves beyond its need
	SimCheckpointGiB  time.Duration // simulated driver: checkpoint time per GiB
	SimRestoreGiB     time.Duration // simulated driver: restore time per GiB

	CRIU          string        // criu binary or wrapper; "" = the install script's, else PATH; "none" = no disk tier
	SnapshotDir   string        // snapshot images (0700); "" = <StateDir>/snapshots
	DiskBudgetMiB uint64        // disk snapshots may take; 0 = unlimited
	DiskKeepFree  float64       // share of the snapshot directory's filesystem no dump may fill, 0..1
	CRIUTimeout   time.Duration // deadline of one CRIU dump or restore
	MaxChain      int           // incremental dumps on one full one before the next is full
	LazyRestore   bool          // thaw from disk lazily (userfaultfd, our lazy-pages server) where the kernel allows
	StreamRestore bool          // a thaw from disk that is not lazy takes its pages from our lazy-pages server too, the tree resuming once all are in

	JobMarginMiB   uint64        // headroom a job needs beyond its declaration
	SpikeBuffer    float64       // fraction added to observed peaks (externals, jobs past their declaration)
	AgingStep      time.Duration // a waiting job gains one priority per step; 0 = no aging
	StarveAfter    time.Duration // a job or waiting thaw blocked this long stops smaller ones backfilling its GPUs; 0 = never
	JobKillGrace   time.Duration // TERM -> KILL grace when a job times out or is cancelled
	MinFreeMiB     uint64        // health: skip GPUs with less free memory
	MaxUtilPercent int           // health: skip busier GPUs; 0 = off
	MaxPowerWatts  float64       // health: skip GPUs drawing more; 0 = off
	MaxTempC       int           // health: skip GPUs hotter than this, degrees C; 0 = off
	BannedGPUs     []string      // health: never place on these GPUs (indices or UUIDs)

	CgroupRoot string // parent of the trees' cgroups (cpu.weight): "" = the daemon's delegated cgroup, CgroupNone = off, or an absolute path
	// UserCgroups is where a user's own delegated cgroup is (%U: the uid);
	// a non-root user's trees go there when it exists. CgroupNone = off.
	UserCgroups string

	FillerChunkMiB uint64        // a filler allocates and frees GPU memory in chunks of this size
	FillerTick     time.Duration // how often a filler checks the GPU's free memory
	FillerOrphan   time.Duration // a filler left without a daemon this long frees its memory and exits

	MPSControl string // nvidia-cuda-mps-control binary; "" = found on PATH

	MetricsAddr string // Prometheus /metrics listen address; "" = off, a port alone = loopback

	Limits Limits // per-user caps on non-root callers (docs/operations.md, "Limits")
}

// Limits are the caps one non-root user is held to, so that no local user
// can take the daemon or the GPUs away from the others. Root (the operator)
// is held only to the retention limits. A cap of 0 turns it off.
type Limits struct {
	ConnsPerUser   int           // client connections open at once
	LineMiBPerUser uint64        // request lines longer than the read buffer gathered at once, each counted as api.MaxLineBytes
	MetricsConns   int           // connections to --metrics-addr one local user holds open
	StreamsPerUser int           // streaming calls (logs -f, events, wait, job wait, acquire) at once
	TurnsPerUser   int           // quick calls (lists, logs) answered at once; 0 = half the daemon's CPUs
	CPUPerUser     float64       // share of one CPU a user's bulk work (logs, listings) and process starts take on average
	ProcsPerUser   int           // managed processes not yet exited
	JobsPerUser    int           // jobs submitted and not finished
	JobMiBPerUser  uint64        // MiB of command and environment a user's unfinished jobs keep
	LeasesPerUser  int           // leases pending or held
	MaxPriority    int           // highest job, lease and process priority a user may set
	LeaseMaxHold   time.Duration // a user's granted lease is released after this long
	FillFraction   float64       // share of each GPU's memory a user's fillers may hold, 0..1
	LeaseFraction  float64       // share of all GPUs' memory a user's leases may hold or wait for, 0..1
	TasksFraction  float64       // share of the trees' tasks in the daemon's cgroups one user's trees may hold, 0..1
	// DiskFraction is the share of the snapshot disk (--disk-budget, or
	// the snapshot directory's filesystem) a user's snapshots may take, 0..1.
	DiskFraction float64
	// RAMFraction is the share of --ram-budget a user's frozen processes
	// may hold in host RAM, 0..1.
	RAMFraction     float64
	KeepFinished    int           // exited processes and finished jobs kept per user (root included)
	KeepFinishedFor time.Duration // and for how long after they ended (root included)
	// KeepFinishedLogMiB is what the logs of a user's exited processes
	// kept hold on disk together, newest first (root included).
	KeepFinishedLogMiB uint64
	// LogMiBPerUser is what the logs of a user's live processes hold on
	// disk together, with their rotated copies.
	LogMiBPerUser uint64
	// LogDiskFraction is the share of the log directory's filesystem the
	// logs of all non-root users' live processes may hold together, 0..1.
	LogDiskFraction float64
	// KeepFinishedLogFraction is the share of the log directory's
	// filesystem the logs of all users' exited processes kept may hold
	// together, 0..1 (root included).
	KeepFinishedLogFraction float64
}

// MetricsListenAddr is the host:port /metrics is served on: MetricsAddr,
// with 127.0.0.1 when it names only a port (":9400" or "9400").
func (c Config) MetricsListenAddr() (string, error) {
	addr := c.MetricsAddr
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q: must be 1..65535", port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// MaxTempC is the highest --max-temp accepted, in degrees C: above any
// GPU's shutdown temperature.
const MaxTempC = 150

// CgroupNone turns the trees' cgroups (cpu.weight) off: only nice applies.
// As UserCgroups, it keeps every tree out of its user's cgroup.
const CgroupNone = "none"

// DefaultUserCgroups is the cgroup systemd delegates to a user's own
// service manager.
const DefaultUserCgroups = "/sys/fs/cgroup/user.slice/user-%U.slice/user@%U.service"

// Snapshots is the snapshot directory in effect.
func (c Config) Snapshots() string {
	if c.SnapshotDir != "" {
		return c.SnapshotDir
	}
	return filepath.Join(c.StateDir, "snapshots")
}

// PrivateCRIU is where scripts/install-criu.sh puts its CRIU.
const PrivateCRIU = "/opt/gpusched/criu/bin/criu"

// Checkpoint driver choices.
const (
	DriverAuto = "auto" // sim under --sim; else api when libcuda has the symbols, else cli, else none
	DriverAPI  = "api"
	DriverCLI  = "cli"
	DriverSim  = "sim"
	DriverNone = "none"
)

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Version:     SchemaVersion,
		Socket:      api.DefaultSocket,
		MaxConns:    4096,
		StateDir:    "/var/lib/gpusched",
		LogDir:      "/var/log/gpusched",
		KillGrace:   10 * time.Second,
		LogMaxBytes: 64 << 20,
		LogKeep:     1,
		GPUPoll:     time.Second,
		CPUSlice:    100 * time.Microsecond,
		DaemonTasks: 512,

		RealtimePriority: 1,
		RealtimeCPU:      0.5,
		LogLevel:         "info",
		LogFormat:        "json",

		CheckpointDriver:  DriverAuto,
		LockTimeout:       10 * time.Second,
		CheckpointTimeout: 5 * time.Minute,
		FreezeStop:        true,
		ThawMarginMiB:     256,
		SimCheckpointGiB:  20 * time.Millisecond,
		SimRestoreGiB:     20 * time.Millisecond,

		CRIUTimeout:   10 * time.Minute,
		MaxChain:      4,
		StreamRestore: true,
		DiskKeepFree:  0.1,

		JobMarginMiB: 512,
		SpikeBuffer:  0.1,
		AgingStep:    10 * time.Minute,
		StarveAfter:  30 * time.Minute,
		JobKillGrace: 10 * time.Second,

		UserCgroups: DefaultUserCgroups,

		FillerChunkMiB: 256,
		FillerTick:     10 * time.Millisecond,
		FillerOrphan:   10 * time.Minute,

		Limits: DefaultLimits(),
	}
}

// DefaultLimits are caps a shared lab box accepts: generous for one user's
// real work, far below what takes the daemon or a GPU from everyone else.
func DefaultLimits() Limits {
	return Limits{
		ConnsPerUser:            256,
		LineMiBPerUser:          32,
		MetricsConns:            4,
		CPUPerUser:              0.1,
		StreamsPerUser:          64,
		ProcsPerUser:            256,
		JobsPerUser:             10000,
		JobMiBPerUser:           64,
		LeasesPerUser:           16,
		MaxPriority:             100,
		LeaseMaxHold:            24 * time.Hour,
		FillFraction:            0.5,
		LeaseFraction:           0.5,
		TasksFraction:           0.5,
		DiskFraction:            0.25,
		RAMFraction:             0.5,
		KeepFinished:            500,
		KeepFinishedFor:         7 * 24 * time.Hour,
		KeepFinishedLogMiB:      4 << 10,
		LogMiBPerUser:           8 << 10,
		LogDiskFraction:         0.25,
		KeepFinishedLogFraction: 0.25,
	}
}

// Load builds the configuration from defaults, the configuration file
// (--config, $GPUSCHED_CONFIG, else DefaultFile when it exists),
// $GPUSCHED_SOCKET and args, each overriding the one before, then
// validates it. See LoadWith.
func Load(args []string, stderr io.Writer) (Config, error) {
	return LoadWith(DefaultFile, args, stderr)
}

func (c *Config) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.Socket, "socket", c.Socket, "unix socket to serve (also $"+api.SocketEnv+")")
	fs.StringVar(&c.Group, "group", c.Group, "group owning the socket, which is mode 0660")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "most client connections served at once; more are answered unavailable and closed (each takes one file descriptor: keep it under LimitNOFILE)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory for persisted state (with a --socket other than the default: <socket dir>/"+besideState+")")
	fs.StringVar(&c.LogDir, "log-dir", c.LogDir, "directory for managed processes' logs (with a --socket other than the default: <socket dir>/"+besideLogs+")")
	fs.StringVar(&c.Sim, "sim", c.Sim, "simulate GPUs instead of NVML: N or NxSIZE (e.g. 2x24G), then :mig=I,J,... for GPUs in MIG mode, :reserved=SIZE for the driver's reserve, :context=SIZE for a CUDA context's cost")
	fs.StringVar(&c.SimDir, "sim-dir", c.SimDir, "shared simulated-GPU state (default: <socket dir>/sim)")
	fs.DurationVar(&c.KillGrace, "kill-grace", c.KillGrace, "default time between SIGTERM and SIGKILL on kill")
	fs.Int64Var(&c.LogMaxBytes, "log-max-bytes", c.LogMaxBytes, "rotate a process log past this size (its supervisor does; a change applies to processes started after it)")
	fs.IntVar(&c.LogKeep, "log-keep", c.LogKeep, "rotated log files kept per process")
	fs.DurationVar(&c.GPUPoll, "gpu-poll", c.GPUPoll, "GPU sampling interval")
	fs.StringVar(&c.DaemonCPUs, "daemon-cpus", c.DaemonCPUs, "CPUs the daemon's own threads run on, a CPU list (\"0-1\"), so that no user's process is ever ahead of a request there; the processes it starts for users run on the other CPUs (empty: every CPU for the daemon too)")
	fs.IntVar(&c.DaemonTasks, "daemon-tasks", c.DaemonTasks, "tasks (processes and threads) of the daemon's cgroup kept for the daemon: the managed trees that run in its cgroups go into a pids cgroup holding that many fewer, half where that many are more than half (0: no reserve)")
	fs.IntVar(&c.RealtimePriority, "realtime-priority", c.RealtimePriority, "real-time priority (SCHED_FIFO, 1..99) of the daemon's own threads, so that a request's wake-up runs ahead of every user's process; processes it starts keep the fair class (0: the fair class for the daemon too)")
	fs.Float64Var(&c.RealtimeCPU, "realtime-cpu", c.RealtimeCPU, "CPUs the daemon may use at real time, on average: whenever it has used more, its threads run in the fair class until it is within it again")
	fs.DurationVar(&c.CPUSlice, "cpu-slice", c.CPUSlice, "scheduler slice the daemon asks for its own threads (Linux 6.12+), so that a request's wake-up preempts a CPU-bound task; processes it starts keep the kernel's default (0: the kernel's default for the daemon too)")
	fs.StringVar(&c.InitPath, "init-path", c.InitPath, "the gpuschedd binary, re-executed as its helpers and, unless gpusched-init is installed beside it, as each process's supervisor (default: this executable)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or console")
	fs.StringVar(&c.CheckpointDriver, "checkpoint-driver", c.CheckpointDriver, "freeze/thaw driver: auto, api (libcuda helper), cli (cuda-checkpoint), sim or none")
	fs.StringVar(&c.CudaCheckpoint, "cuda-checkpoint", c.CudaCheckpoint, "cuda-checkpoint binary (default: found on PATH)")
	fs.StringVar(&c.Libcuda, "libcuda", c.Libcuda, "CUDA driver library for the api driver (default: libcuda.so.1)")
	fs.DurationVar(&c.LockTimeout, "lock-timeout", c.LockTimeout, "default wait for in-flight CUDA work when a freeze locks a process")
	fs.DurationVar(&c.CheckpointTimeout, "checkpoint-timeout", c.CheckpointTimeout, "deadline of each checkpoint, restore and unlock call")
	fs.BoolVar(&c.FreezeStop, "freeze-stop", c.FreezeStop, "stop a frozen tree with SIGSTOP (continued before its thaw)")
	fs.Var(mibFlag{&c.RAMBudgetMiB}, "ram-budget", "host RAM frozen processes may hold, e.g. 64G (0: unlimited)")
	fs.Var(mibFlag{&c.ThawMarginMiB}, "thaw-margin", "GPU memory a thaw must leave free beyond its need, e.g. 256M")
	fs.DurationVar(&c.SimCheckpointGiB, "sim-checkpoint-per-gib", c.SimCheckpointGiB, "simulated driver: checkpoint time per GiB moved")
	fs.DurationVar(&c.SimRestoreGiB, "sim-restore-per-gib", c.SimRestoreGiB, "simulated driver: restore time per GiB moved")
	fs.StringVar(&c.CRIU, "criu", c.CRIU, "CRIU binary for the disk tier (default: "+PrivateCRIU+" when installed, else criu on PATH; none: no disk tier)")
	fs.StringVar(&c.SnapshotDir, "snapshot-dir", c.SnapshotDir, "directory for snapshot images, root only, 0700 (default: <state-dir>/snapshots)")
	fs.Var(mibFlag{&c.DiskBudgetMiB}, "disk-budget", "disk space snapshots may take, e.g. 500G (0: unlimited)")
	fs.Float64Var(&c.DiskKeepFree, "disk-keep-free", c.DiskKeepFree, "share of the snapshot directory's filesystem no dump may fill, 0..1: a hibernate that would leave less of it free is refused before it starts, and a dump stops writing there (0: none)")
	fs.DurationVar(&c.CRIUTimeout, "criu-timeout", c.CRIUTimeout, "deadline of each CRIU dump or restore")
	fs.IntVar(&c.MaxChain, "max-chain", c.MaxChain, "incremental hibernates on top of one full image before the next is full again")
	fs.BoolVar(&c.StreamRestore, "stream-restore", c.StreamRestore, "a thaw from disk that is not lazy still takes its memory from our lazy-pages server (userfaultfd, O_DIRECT reads, no page cache) where the kernel allows, and the process resumes once all of it is in; false: CRIU reads the pages itself")
	fs.BoolVar(&c.LazyRestore, "lazy-restore", c.LazyRestore, "thaw from disk lazily (userfaultfd: CRIU restores the tree, our lazy-pages server brings its memory in) where the kernel allows: the process runs before its memory is all back")
	fs.Var(mibFlag{&c.JobMarginMiB}, "job-margin", "GPU headroom a queued job needs beyond its declaration, e.g. 512M")
	fs.Float64Var(&c.SpikeBuffer, "spike-buffer", c.SpikeBuffer, "fraction added to observed peaks of external processes and of jobs past their declaration")
	fs.DurationVar(&c.AgingStep, "aging-step", c.AgingStep, "a waiting job gains one priority level per this much waiting (0: no aging)")
	fs.DurationVar(&c.StarveAfter, "starve-after", c.StarveAfter, "a job blocked this long keeps smaller jobs off the GPUs it waits for, a waiting thaw other thaws (0: never)")
	fs.DurationVar(&c.JobKillGrace, "job-kill-grace", c.JobKillGrace, "time between SIGTERM and SIGKILL when a job times out or is cancelled")
	fs.Var(mibFlag{&c.MinFreeMiB}, "min-free", "health filter: place nothing on a GPU with less free memory, e.g. 1G")
	fs.IntVar(&c.MaxUtilPercent, "max-util", c.MaxUtilPercent, "health filter: place nothing on a GPU busier than this percent (0: off)")
	fs.Float64Var(&c.MaxPowerWatts, "max-power", c.MaxPowerWatts, "health filter: place nothing on a GPU drawing more watts (0: off)")
	fs.IntVar(&c.MaxTempC, "max-temp", c.MaxTempC, "health filter: place nothing on a GPU hotter than this many degrees C (0: off)")
	fs.Var(mibFlag{&c.FillerChunkMiB}, "filler-chunk", "fillers hold GPU memory in chunks of this size, e.g. 256M")
	fs.DurationVar(&c.FillerTick, "filler-tick", c.FillerTick, "how often a filler checks its GPU's free memory")
	fs.DurationVar(&c.FillerOrphan, "filler-orphan", c.FillerOrphan, "a filler left without a daemon this long frees its memory and exits")
	fs.StringVar(&c.MPSControl, "mps-control", c.MPSControl, "NVIDIA MPS control binary for mps_threads and mps_mem_limit (default: nvidia-cuda-mps-control on PATH)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "serve Prometheus metrics at http://ADDR/metrics: host:port, or a port alone for 127.0.0.1 (default: off)")
	l := &c.Limits
	fs.Var(mibFlag{&l.LineMiBPerUser}, "max-request-bytes-per-user", "memory one user's request lines being read may hold at once, e.g. 32M, each line over 4 KiB counted as the longest one (1 MiB); past it a long line is read and refused, resource_exhausted (0: no cap)")
	fs.IntVar(&l.ConnsPerUser, "max-conns-per-user", l.ConnsPerUser, "most client connections one non-root user may hold open (0: only --max-conns applies)")
	fs.IntVar(&l.MetricsConns, "max-metrics-conns-per-user", l.MetricsConns, "most connections to --metrics-addr one non-root local user may hold open; more are closed at once (0: only the endpoint's 32, less root's reserve of 8, apply)")
	fs.IntVar(&l.StreamsPerUser, "max-streams-per-user", l.StreamsPerUser, "most streaming calls (logs, events, wait, job wait, acquire until granted) one non-root user may run at once (0: no cap)")
	fs.IntVar(&l.TurnsPerUser, "max-busy-per-user", l.TurnsPerUser, "most quick calls (status, ps, jobs, logs without -f, submit, ...) of one non-root user the daemon answers at once; the others wait their turn (0: half the daemon's CPUs, at least 1)")
	fs.Float64Var(&l.CPUPerUser, "max-cpu-per-user", l.CPUPerUser, "share of one CPU the daemon spends on one non-root user's bulk work (every line of a log, long listings, submissions, removals) and process starts on average; a user over it waits (0: no cap)")
	fs.IntVar(&l.ProcsPerUser, "max-procs-per-user", l.ProcsPerUser, "most managed processes one non-root user may have that have not exited (0: no cap)")
	fs.IntVar(&l.JobsPerUser, "max-jobs-per-user", l.JobsPerUser, "most unfinished jobs one non-root user may have queued or running (0: no cap)")
	fs.Var(mibFlag{&l.JobMiBPerUser}, "max-job-bytes-per-user", "command and environment bytes one non-root user's unfinished jobs may keep in the daemon, e.g. 64M (0: no cap)")
	fs.IntVar(&l.LeasesPerUser, "max-leases-per-user", l.LeasesPerUser, "most GPU leases one non-root user may hold or wait for (0: no cap)")
	fs.IntVar(&l.MaxPriority, "user-max-priority", l.MaxPriority, "highest job, lease and process priority a non-root user may set (root: up to 1000)")
	fs.DurationVar(&l.LeaseMaxHold, "user-lease-max-hold", l.LeaseMaxHold, "a non-root user's granted lease is released after this long (0: held until released)")
	fs.Float64Var(&l.FillFraction, "user-fill-fraction", l.FillFraction, "share of each GPU's memory one non-root user's filler may hold, 0..1 (0: no cap)")
	fs.Float64Var(&l.TasksFraction, "user-tasks-fraction", l.TasksFraction, "share of the tasks (processes and threads) the managed trees in the daemon's cgroups may hold that one non-root user's trees may hold, where trees are moved into a cgroup v1 pids hierarchy, 0..1 (0 or 1: no share of their own)")
	fs.Float64Var(&l.LeaseFraction, "user-lease-fraction", l.LeaseFraction, "share of all GPUs' memory one non-root user's leases may hold or wait for together, a lease without min_free counting its GPUs whole, 0..1 (0 or 1: no cap)")
	fs.Float64Var(&l.RAMFraction, "user-ram-fraction", l.RAMFraction, "share of --ram-budget one non-root user's frozen processes may hold in host RAM beside other users' frozen processes, 0..1; past it their own are hibernated first (0: no cap)")
	fs.Float64Var(&l.DiskFraction, "user-disk-fraction", l.DiskFraction, "share of the snapshot disk (--disk-budget, or where there is none the snapshot directory's filesystem) one non-root user's snapshots may take, 0..1 (0: no cap)")
	fs.IntVar(&l.KeepFinished, "keep-finished", l.KeepFinished, "exited processes and finished jobs kept per user, newest first; older ones are removed (0: no count cap)")
	fs.DurationVar(&l.KeepFinishedFor, "keep-finished-for", l.KeepFinishedFor, "exited processes and finished jobs are removed this long after they ended (0: no age cap)")
	fs.Var(mibFlag{&l.LogMiBPerUser}, "max-log-bytes-per-user", "what the logs of one non-root user's live processes may hold on disk together, e.g. 8G, checked each second; past it their rotated copies are removed, the oldest first, then their largest logs emptied (0: no cap)")
	fs.Float64Var(&l.LogDiskFraction, "log-disk-fraction", l.LogDiskFraction, "share of the log directory's filesystem the logs of all non-root users' live processes may hold together, 0..1, checked each second; past it the users who hold the most are cut to equal shares, as by --max-log-bytes-per-user (0: no cap)")
	fs.Var(mibFlag{&l.KeepFinishedLogMiB}, "keep-finished-log-bytes", "what the logs of one user's exited processes kept may hold on disk together, e.g. 4G; past it the oldest are removed with their logs (0: no cap)")
	fs.Float64Var(&l.KeepFinishedLogFraction, "keep-finished-log-fraction", l.KeepFinishedLogFraction, "share of the log directory's filesystem the logs of all users' exited processes kept may hold together, 0..1; past it the users who hold the most lose their oldest first, to equal shares, as by --keep-finished-log-bytes (0: no cap)")
	fs.StringVar(&c.CgroupRoot, "cgroup-root", c.CgroupRoot, "cgroup v2 directory under which each managed tree gets a cgroup whose cpu.weight follows its nice (default: the daemon's own cgroup, delegated by systemd; none: off)")
	fs.StringVar(&c.UserCgroups, "user-cgroups", c.UserCgroups, "a user's own delegated cgroup v2 directory (%U: the uid), where a non-root user's trees go when it exists, the user owns it and (for user@UID.service) the user lingers, under their systemd limits (none: off)")
	fs.Var(&listFlag{&c.BannedGPUs, func(s string) error {
		_, err := api.ParseGPURef(s)
		return err
	}}, "ban-gpu", "health filter: never place jobs or leases on this GPU (index or UUID; repeatable)")
}

// mibFlag is a memory size flag in MiB ("64G", "512M", or MiB as a number).
type mibFlag struct{ p *uint64 }

func (f mibFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return fmt.Sprintf("%dM", *f.p)
}

func (f mibFlag) Set(s string) error {
	n, err := api.ParseMiB(s)
	if err != nil {
		return err
	}
	*f.p = n
	return nil
}

// listFlag is a repeatable flag: each use appends one value, checked by
// check. In the configuration file it is an array, and a list given there
// or on the command line replaces the one before it.
type listFlag struct {
	p     *[]string
	check func(string) error
}

func (f *listFlag) String() string {
	if f == nil || f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f *listFlag) Set(s string) error {
	if f.check != nil {
		if err := f.check(s); err != nil {
			return err
		}
	}
	*f.p = append(*f.p, s)
	return nil
}

func (f *listFlag) reset() { *f.p = nil }

// Validate reports the first problem with c, naming the setting.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Version == SchemaVersion, "config version %d: this daemon understands %d", c.Version, SchemaVersion)
	check(filepath.IsAbs(c.Socket), "--socket %q: must be an absolute path", c.Socket)
	check(len(c.Socket) < 108, "--socket %q: longer than a unix socket path may be (107 bytes)", c.Socket)
	check(filepath.IsAbs(c.StateDir), "--state-dir %q: must be an absolute path", c.StateDir)
	check(filepath.IsAbs(c.LogDir), "--log-dir %q: must be an absolute path", c.LogDir)
	check(c.SimDir == "" || filepath.IsAbs(c.SimDir), "--sim-dir %q: must be an absolute path", c.SimDir)
	check(c.InitPath == "" || filepath.IsAbs(c.InitPath), "--init-path %q: must be an absolute path", c.InitPath)
	check(c.KillGrace > 0, "--kill-grace %v: must be positive", c.KillGrace)
	check(c.MaxConns >= 1 && c.MaxConns <= 1<<20, "--max-conns %d: must be 1..1048576", c.MaxConns)
	check(c.LogMaxBytes >= 4096, "--log-max-bytes %d: must be at least 4096", c.LogMaxBytes)
	check(c.LogKeep >= 0 && c.LogKeep <= 100, "--log-keep %d: must be 0..100", c.LogKeep)
	check(c.GPUPoll >= 10*time.Millisecond, "--gpu-poll %v: must be at least 10ms", c.GPUPoll)
	if c.DaemonCPUs != "" {
		_, err := cpuaffinity.Parse(c.DaemonCPUs)
		check(err == nil, "--daemon-cpus %q: %v", c.DaemonCPUs, err)
	}
	check(c.DaemonTasks >= 0 && c.DaemonTasks <= 1<<22, "--daemon-tasks %d: must be 0 (no reserve) or 1..%d", c.DaemonTasks, 1<<22)
	check(c.RealtimePriority >= 0 && c.RealtimePriority <= rtprio.MaxPriority, "--realtime-priority %d: must be 0 (the fair class) or 1..%d", c.RealtimePriority, rtprio.MaxPriority)
	check(c.RealtimeCPU > 0 && c.RealtimeCPU <= 4096, "--realtime-cpu %v: must be more than 0 and at most 4096 CPUs", c.RealtimeCPU)
	check(c.CPUSlice == 0 || c.CPUSlice >= cpuslice.Min && c.CPUSlice <= cpuslice.Max, "--cpu-slice %v: must be 0 (the kernel's default) or %v..%v", c.CPUSlice, cpuslice.Min, cpuslice.Max)
	check(c.LogFormat == "json" || c.LogFormat == "console", "--log-format %q: must be json or console", c.LogFormat)
	check(c.CudaCheckpoint == "" || filepath.IsAbs(c.CudaCheckpoint), "--cuda-checkpoint %q: must be an absolute path", c.CudaCheckpoint)
	check(c.LockTimeout > 0, "--lock-timeout %v: must be positive", c.LockTimeout)
	check(c.CheckpointTimeout >= time.Second, "--checkpoint-timeout %v: must be at least 1s", c.CheckpointTimeout)
	check(c.SimCheckpointGiB >= 0 && c.SimRestoreGiB >= 0, "--sim-checkpoint-per-gib/--sim-restore-per-gib: must not be negative")
	check(c.CRIU == "" || c.CRIU == "none" || filepath.IsAbs(c.CRIU), "--criu %q: must be an absolute path or none", c.CRIU)
	check(c.SnapshotDir == "" || filepath.IsAbs(c.SnapshotDir), "--snapshot-dir %q: must be an absolute path", c.SnapshotDir)
	check(c.CRIUTimeout >= time.Second, "--criu-timeout %v: must be at least 1s", c.CRIUTimeout)
	check(c.MaxChain >= 0 && c.MaxChain <= 64, "--max-chain %d: must be 0..64", c.MaxChain)
	check(c.SpikeBuffer >= 0 && c.SpikeBuffer <= 10, "--spike-buffer %v: must be 0..10", c.SpikeBuffer)
	check(c.DiskKeepFree >= 0 && c.DiskKeepFree <= 1, "--disk-keep-free %v: must be 0..1", c.DiskKeepFree)
	check(c.AgingStep >= 0 && c.StarveAfter >= 0, "--aging-step/--starve-after: must not be negative")
	check(c.JobKillGrace > 0, "--job-kill-grace %v: must be positive", c.JobKillGrace)
	check(c.MaxUtilPercent >= 0 && c.MaxUtilPercent <= 100, "--max-util %d: must be 0..100", c.MaxUtilPercent)
	check(c.MaxPowerWatts >= 0, "--max-power %v: must not be negative", c.MaxPowerWatts)
	check(c.MaxTempC >= 0 && c.MaxTempC <= MaxTempC, "--max-temp %d: must be 0..%d degrees C", c.MaxTempC, MaxTempC)
	check(c.FillerChunkMiB >= 1 && c.FillerChunkMiB <= 64<<10, "--filler-chunk %d MiB: must be 1M..64G", c.FillerChunkMiB)
	check(c.FillerTick >= time.Millisecond && c.FillerTick <= time.Minute, "--filler-tick %v: must be 1ms..1m", c.FillerTick)
	check(c.FillerOrphan >= time.Second, "--filler-orphan %v: must be at least 1s", c.FillerOrphan)
	check(c.CgroupRoot == "" || c.CgroupRoot == CgroupNone || filepath.IsAbs(c.CgroupRoot) && filepath.Clean(c.CgroupRoot) == c.CgroupRoot,
		"--cgroup-root %q: must be a clean absolute path or none", c.CgroupRoot)
	ucg := strings.ReplaceAll(c.UserCgroups, "%U", "0")
	check(c.UserCgroups == CgroupNone || filepath.IsAbs(ucg) && filepath.Clean(ucg) == ucg && !strings.Contains(ucg, "%"),
		"--user-cgroups %q: must be a clean absolute path (with %%U for the uid) or none", c.UserCgroups)
	errs = append(errs, c.Limits.validate()...)
	if c.MetricsAddr != "" {
		_, err := c.MetricsListenAddr()
		check(err == nil, "--metrics-addr %q: %v", c.MetricsAddr, err)
	}
	switch c.CheckpointDriver {
	case DriverAuto, DriverAPI, DriverCLI, DriverNone:
	case DriverSim:
		check(c.Sim != "", "--checkpoint-driver sim: needs --sim")
	default:
		errs = append(errs, fmt.Errorf("--checkpoint-driver %q: must be auto, api, cli, sim or none", c.CheckpointDriver))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: must be debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// validate reports every limit out of range, naming its flag.
func (l Limits) validate() []error {
	var errs []error
	for _, n := range []struct {
		flag string
		v    int
	}{{"max-conns-per-user", l.ConnsPerUser}, {"max-metrics-conns-per-user", l.MetricsConns}, {"max-streams-per-user", l.StreamsPerUser}, {"max-busy-per-user", l.TurnsPerUser}, {"max-procs-per-user", l.ProcsPerUser},
		{"max-jobs-per-user", l.JobsPerUser}, {"max-leases-per-user", l.LeasesPerUser}, {"keep-finished", l.KeepFinished}} {
		if n.v < 0 || n.v > 1<<24 {
			errs = append(errs, fmt.Errorf("--%s %d: must be 0..16777216", n.flag, n.v))
		}
	}
	if l.MaxPriority < -1000 || l.MaxPriority > 1000 {
		errs = append(errs, fmt.Errorf("--user-max-priority %d: must be -1000..1000", l.MaxPriority))
	}
	if l.LeaseMaxHold < 0 || l.KeepFinishedFor < 0 {
		errs = append(errs, fmt.Errorf("--user-lease-max-hold/--keep-finished-for: must not be negative"))
	}
	if !(l.CPUPerUser == 0 || l.CPUPerUser >= 0.0001 && l.CPUPerUser <= 1024) {
		errs = append(errs, fmt.Errorf("--max-cpu-per-user %v: must be 0 (no cap) or 0.0001..1024 (a share of one CPU)", l.CPUPerUser))
	}
	if !(l.TasksFraction >= 0 && l.TasksFraction <= 1) {
		errs = append(errs, fmt.Errorf("--user-tasks-fraction %v: must be 0..1", l.TasksFraction))
	}
	if !(l.LeaseFraction >= 0 && l.LeaseFraction <= 1) {
		errs = append(errs, fmt.Errorf("--user-lease-fraction %v: must be 0..1", l.LeaseFraction))
	}
	if !(l.FillFraction >= 0 && l.FillFraction <= 1) {
		errs = append(errs, fmt.Errorf("--user-fill-fraction %v: must be 0..1", l.FillFraction))
	}
	if !(l.RAMFraction >= 0 && l.RAMFraction <= 1) {
		errs = append(errs, fmt.Errorf("--user-ram-fraction %v: must be 0..1", l.RAMFraction))
	}
	if !(l.DiskFraction >= 0 && l.DiskFraction <= 1) {
		errs = append(errs, fmt.Errorf("--user-disk-fraction %v: must be 0..1", l.DiskFraction))
	}
	if !(l.LogDiskFraction >= 0 && l.LogDiskFraction <= 1) {
		errs = append(errs, fmt.Errorf("--log-disk-fraction %v: must be 0..1", l.LogDiskFraction))
	}
	if !(l.KeepFinishedLogFraction >= 0 && l.KeepFinishedLogFraction <= 1) {
		errs = append(errs, fmt.Errorf("--keep-finished-log-fraction %v: must be 0..1", l.KeepFinishedLogFraction))
	}
	return errs
}
