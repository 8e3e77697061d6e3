package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/activate"
	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/memlimit"
	"github.com/gpusched/gpusched/internal/mps"
	"github.com/gpusched/gpusched/internal/netguard"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/internal/thawqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// Version is the daemon's version, set at build time with -ldflags.
var Version = "dev"

// gpuBackend is what the daemon needs from a GPU backend (NVML or simulated).
type gpuBackend interface {
	Name() string
	Sample(ctx context.Context) (gpu.Sample, error)
	// BetweenCalls runs fn while no process of uid is inside a GPU driver
	// call: trees are stopped through it.
	BetweenCalls(uid uint32, fn func()) error
	Close() error
}

// Daemon is one gpuschedd instance.
type Daemon struct {
	cfg        config.Config
	log        *zap.Logger
	gpus       gpuBackend
	simDir     string // set when the backend is simulated
	initPath   string // the supervisor and log reader binary (gpusched-init, else helperPath)
	helperPath string // this daemon's binary, re-executed as its helpers
	bootID     string
	startedAt  time.Time

	table      *proctable.Table
	driver     cudaDriver // nil when freeze and thaw are unavailable
	driverErr  error      // why driver is nil
	criu       criuTier   // nil when the disk tier is off
	criuErr    error      // why criu is nil
	snaps      *checkpoint.Snapshots
	incomplete []string // snapshot directories without metadata found at boot
	thaws      *thawqueue.Queue
	ramMu      sync.Mutex // host RAM budget checks
	events     *broker
	sampler    *sampler
	procs      *runtimes
	ops        keyedMutex
	names      userNames
	methods    map[string]method
	jobs       *jobqueue.Queue
	learned    *jobqueue.Learned
	sched      *scheduler
	leases     *leaseSet
	cpu        cpuPriority
	users      userCgroups  // nil: every tree stays in the daemon's cgroups
	trees      treeTasks    // nil: the trees in the daemon's cgroups may take every task it may hold
	checks     callerChecks // of a command's dir and program, as its user
	mps        *mps.Manager // the MPS control daemon and its clients
	fillers    *fillerSet
	activator  *activate.Activator
	metrics    *metrics         // nil while --metrics-addr is off
	logWatch   *logfile.Watcher // wakes every log follower; closed when Run ends
	streamCap  *limits.Slots    // streaming calls in progress per user
	turns      *limits.Turns    // quick calls being answered per user
	criuTurns  *limits.Turns    // CRIU dumps and restores of one user's trees: one at a time
	bulk       bulkGate         // bulk work (long replies, placement passes) in progress
	logReader  logReader        // nil: the daemon encodes every logs reply itself

	conns    *connSet
	wg       sync.WaitGroup // connection goroutines
	streams  sync.WaitGroup // streaming calls in progress
	stopping atomic.Bool    // set once shutdown begins
	lock     *os.File       // flock on the state dir
	ready    chan struct{}  // closed once the socket serves
	bg       sync.WaitGroup // job attempts being started or ended
	retain   chan struct{}  // kicks a retention pass
}

// Option adjusts a Daemon built by New.
type Option func(*Daemon)

// WithLogger replaces the logger New would build from the configuration.
func WithLogger(l *zap.Logger) Option { return func(d *Daemon) { d.log = l } }

// New validates cfg, puts the process's threads on --daemon-cpus, and
// builds the daemon's subsystems. It starts nothing: Run does.
func New(cfg config.Config, opts ...Option) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cpus, err := confineToDaemonCPUs(cfg.DaemonCPUs)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, events: newBroker(), procs: newRuntimes(),
		sched: newScheduler(), leases: newLeaseSet(), fillers: newFillerSet(), activator: activate.New(), startedAt: time.Now(), ready: make(chan struct{}), retain: make(chan struct{}, 1),
		conns:    newConnSet(cfg.MaxConns, cfg.Limits.ConnsPerUser, int64(cfg.Limits.LineMiBPerUser)<<20),
		logWatch: logfile.NewWatcher(), streamCap: limits.NewSlots(cfg.Limits.StreamsPerUser, "max-streams-per-user", "streaming calls in progress"),
		turns: limits.NewTurns(turnsPerUser(cfg.Limits.TurnsPerUser)), criuTurns: limits.NewTurns(1), checks: newCallerChecks(), bulk: bulkgate.ForProcs().Metered(limits.NewCPUShare(cfg.Limits.CPUPerUser))}
	d.thaws = thawqueue.New(d.thawGPUs, cfg.ThawMarginMiB, cfg.StarveAfter, d.sched.kick, d.sched)
	for _, o := range opts {
		o(d)
	}
	if d.log == nil {
		l, err := newLogger(cfg)
		if err != nil {
			return nil, err
		}
		d.log = l
	}
	d.logDaemonCPUs(cpus)
	d.detectCPU()
	d.users = newUserCgroups(cfg)
	d.helperPath = cfg.InitPath
	if d.helperPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable for the process init: %w", err)
		}
		d.helperPath = exe
	}
	var passed string
	d.initPath, passed = sandbox.SupervisorBeside(d.helperPath)
	if d.logReader == nil {
		d.logReader = logreader.Reader{Exe: d.initPath}
	}
	if passed != "" {
		d.log.Warn("supervisor binary passed over; the daemon's own binary supervises instead", zap.String("why", passed))
	}
	bootID, err := procfs.BootID()
	if err != nil {
		return nil, fmt.Errorf("read boot id: %w", err)
	}
	d.bootID = bootID
	if err := d.openGPUs(); err != nil {
		return nil, err
	}
	d.openMPS()
	d.methods = d.methodTable()
	d.metrics = newMetrics(d)
	memlimit.Start()
	return d, nil
}

func (d *Daemon) openGPUs() error {
	if d.gpus != nil { // set by a test's Option
		return nil
	}
	if d.cfg.Sim == "" {
		b, err := gpu.NewNVML()
		if err != nil {
			return err
		}
		d.gpus = b
		return nil
	}
	spec, err := gpu.ParseSimSpec(d.cfg.Sim)
	if err != nil {
		return fmt.Errorf("--sim %q: %w", d.cfg.Sim, err)
	}
	b, err := gpu.NewSim(d.cfg.SimDir, spec)
	if err != nil {
		return err
	}
	b.SetLockWait(d.cfg.LockTimeout)
	d.gpus, d.simDir = b, d.cfg.SimDir
	return nil
}

// Run serves until ctx ends, then shuts down cleanly; managed processes keep
// running and are re-adopted by the next daemon. A canceled ctx is a clean
// exit (nil).
func (d *Daemon) Run(ctx context.Context) error {
	defer d.gpus.Close()
	stopTrace, err := startTrace()
	if err != nil {
		return err
	}
	defer stopTrace()
	if err := d.lockState(); err != nil {
		return err
	}
	defer d.lock.Close()
	defer d.logWatch.Close() // after the streams, which follow through it, have ended
	ln, err := openListener(d.cfg.Socket, d.cfg.Group)
	if err != nil {
		return err
	}
	defer ln.Close()
	acceptor, err := netguard.Take(ln.UnixListener, d.admitConn, d.conns.release)
	if err != nil {
		return err
	}
	defer acceptor.Close()

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = d.boot(startCtx)
	cancel()
	if d.driver != nil {
		defer d.driver.Close()
	}
	defer d.closeCPU()
	if err != nil {
		return err
	}
	d.keepCPUClass(ctx)
	stopMetrics, err := d.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()

	// Serving outlives ctx until shutdown has marked itself, so that calls
	// cut short can say why.
	serving, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var bg sync.WaitGroup
	bg.Add(7)
	go func() { defer bg.Done(); d.sampler.run(serving) }()
	go func() { defer bg.Done(); d.runRetention(serving) }()
	go func() { defer bg.Done(); d.runLogBudget(serving) }()
	go func() { defer bg.Done(); d.keepLearned(serving) }()
	go func() { defer bg.Done(); d.runPolicies(serving) }()
	go func() { defer bg.Done(); d.runScheduler(serving) }()
	go func() { defer bg.Done(); d.runFillers(serving) }()
	d.sched.kick()

	serveErr := make(chan error, 1)
	go func() { serveErr <- d.serve(serving, acceptor) }()
	d.log.Info("serving", zap.String("socket", d.cfg.Socket), zap.String("state_dir", d.cfg.StateDir), zap.String("log_dir", d.cfg.LogDir), zap.String("backend", d.gpus.Name()),
		zap.Int("processes", len(d.table.View().Records)), zap.String("version", Version))
	sdNotify(sdnotify.SdNotifyReady + "\nSTATUS=" + d.statusLine())
	close(d.ready)
	bg.Add(1)
	go func() { defer bg.Done(); d.superviseSystemd(serving) }()

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	sdNotify(sdnotify.SdNotifyStopping)
	d.stopping.Store(true)
	stop()
	acceptor.Close()
	d.streams.Wait() // each ends with a final "shutting down" line
	d.conns.closeAll()
	d.wg.Wait()
	bg.Wait()
	d.bg.Wait()
	d.flushLearned() // what the last period learned, and jobs settled since
	if d.snaps != nil {
		d.snaps.Stop() // the next start removes what is left of the trash
	}
	d.procs.closeAll()
	d.closeMPS()
	d.log.Info("stopped; managed processes keep running")
	return err
}

// Ready is closed once Run serves the socket.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// boot loads the persisted table and re-adopts what still runs.
func (d *Daemon) boot(ctx context.Context) error {
	for _, dir := range []string{d.cfg.LogDir, d.fillerLogDir(), d.statusDir(), d.sandboxDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	st, err := store.OpenRecords(filepath.Join(d.cfg.StateDir, "procs"))
	if err != nil {
		return err
	}
	d.table = proctable.New(st, d.onChange)
	problems, err := d.table.Load()
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	for _, p := range problems {
		d.log.Warn("quarantined a bad process record", zap.String("key", p.Key), zap.String("moved_to", p.Quarantine), zap.Error(p.Err))
	}
	if err := d.openJobs(); err != nil {
		return err
	}
	d.sampler = newSampler(d.gpus, d.cfg.GPUPoll, d.table, d.log)
	d.sampler.onSample = d.onSample
	if err := d.sampler.loadKnown(filepath.Join(d.cfg.StateDir, "gpus.json")); err != nil {
		return err
	}
	if err := d.sampler.refresh(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("first GPU sample: %w", err)
		}
		// A lost GPU must not keep the daemon (and its processes' tracking)
		// down: serve, with the GPU data marked stale and nothing placed,
		// until a sample succeeds.
		d.log.Warn("first GPU sample failed; nothing is placed until one succeeds", zap.Error(err))
	}
	if err := d.openDriver(ctx); err != nil {
		return err
	}
	if err := d.openDiskTier(ctx); err != nil {
		return err
	}
	d.setupCPU()
	d.setupTreeTasks()
	d.adoptAll(ctx)
	d.sweepUntrackedTrees()
	d.sweepSandboxHomes()
	d.adoptMPS(ctx)
	d.discardIncomplete()
	if d.fillers.store, err = store.OpenRecords(filepath.Join(d.cfg.StateDir, "fillers")); err != nil {
		return err
	}
	return d.openFillers(ctx)
}

// lockState takes an exclusive lock on the state dir so two daemons never
// share one.
func (d *Daemon) lockState() error {
	if err := os.MkdirAll(d.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", d.cfg.StateDir, err)
	}
	f, err := os.OpenFile(filepath.Join(d.cfg.StateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", d.cfg.StateDir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("state dir %s is in use by another gpuschedd", d.cfg.StateDir)
		}
		return fmt.Errorf("lock state dir %s: %w", d.cfg.StateDir, err)
	}
	d.lock = f
	return nil
}

func (d *Daemon) statusDir() string { return filepath.Join(d.cfg.StateDir, "status") }

// hello describes the daemon to a caller.
func (d *Daemon) hello(c *call) (any, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return nil, err
	}
	caps := []string{api.CapRun, api.CapLogs, api.CapEvents, api.CapPIDNS, api.CapPeerCred}
	if d.simDir != "" {
		caps = append(caps, api.CapSimGPU)
	} else {
		caps = append(caps, api.CapNVML)
	}
	caps = append(caps, d.driverCaps()...)
	caps = append(caps, d.diskCaps()...)
	caps = append(caps, d.cpuCaps()...)
	caps = append(caps, api.CapQueue, api.CapLeases, api.CapFill)
	if d.driver != nil {
		caps = append(caps, api.CapPreemption)
	}
	return api.Hello{Protocol: api.ProtocolVersion, Version: Version, Backend: d.gpus.Name(), Capabilities: caps,
		CRIU: d.criuVersion(), Caller: c.actor.identity(), DriverWarning: d.driverWarning(), ExcludedGPUs: d.gpuView().migNotes()}, nil
}

func (d *Daemon) methodTable() map[string]method {
	return map[string]method{
		api.MethodHello:          {unary: d.hello, turn: true},
		api.MethodRun:            {unary: d.run, admit: d.atProcCap, metered: true},
		api.MethodKill:           {unary: d.kill},
		api.MethodStatus:         {unary: d.status, turn: true},
		api.MethodPS:             {unary: d.ps, turn: true},
		api.MethodRm:             {unary: d.rm, bulk: true},
		api.MethodGPUs:           {unary: d.listGPUs, turn: true},
		api.MethodFreeze:         {unary: d.freeze},
		api.MethodThaw:           {unary: d.thaw},
		api.MethodSwap:           {unary: d.swap},
		api.MethodActivate:       {stream: d.activate},
		api.MethodMigrate:        {unary: d.migrate},
		api.MethodHibernate:      {unary: d.hibernate},
		api.MethodFork:           {unary: d.fork, admit: d.atProcCap, metered: true},
		api.MethodSnapshots:      {unary: d.snapshots, turn: true},
		api.MethodDeleteSnapshot: {unary: d.deleteSnapshot},
		api.MethodSet:            {unary: d.set},
		api.MethodLogs:           {stream: d.logs},
		api.MethodWait:           {stream: d.wait},
		api.MethodEvents:         {stream: d.subscribe},
		api.MethodSubmit:         {unary: d.submit, admit: d.atJobCap, bulk: true},
		api.MethodJobs:           {unary: d.listJobs, turn: true},
		api.MethodJob:            {unary: d.job, turn: true},
		api.MethodCancel:         {unary: d.cancel},
		api.MethodJobWait:        {stream: d.jobWait},
		api.MethodPruneJobs:      {unary: d.pruneJobs, bulk: true},
		api.MethodAcquire:        {stream: d.acquire},
		api.MethodRelease:        {unary: d.release},
		api.MethodLeases:         {unary: d.listLeases, turn: true},
		api.MethodFill:           {unary: d.fill, metered: true},
		api.MethodUnfill:         {unary: d.unfill},
		api.MethodFillers:        {unary: d.listFillers, turn: true},
	}
}
