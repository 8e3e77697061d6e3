package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The crash test's knobs: CI runs the short seeded form, `make crash` the
// long one with a fresh seed.
var (
	crashSeed = flag.Uint64("crash.seed", 1, "seed of the crash test's workload and kill points (0: from the clock)")
	crashOps  = flag.Int("crash.ops", 36, "operations in the crash test")
	crashKill = flag.Float64("crash.kill", 0.25, "chance that an operation is cut short by kill -9 of the daemon")
)

// crashOp is one kind of operation in the crash test's workload, with its
// weight in the random mix and about how long it takes here: a kill during
// it lands within that span of its start.
type crashOp struct {
	name   string
	weight int
	span   time.Duration
	do     func(r *crashRun, c *api.Client, ctx context.Context) error
}

// errNoTarget means the workload had nothing to apply an operation to.
var errNoTarget = errors.New("no target")

var crashOpsMix = []crashOp{
	{"run", 4, 40 * time.Millisecond, (*crashRun).opRun},
	{"kill", 1, 40 * time.Millisecond, (*crashRun).opKill},
	{"freeze", 3, 150 * time.Millisecond, (*crashRun).opFreeze},
	{"thaw", 3, 150 * time.Millisecond, (*crashRun).opThaw},
	{"swap", 2, 300 * time.Millisecond, (*crashRun).opSwap},
	{"hibernate", 3, 400 * time.Millisecond, (*crashRun).opHibernate},
	{"fork", 1, 600 * time.Millisecond, (*crashRun).opFork},
	{"submit", 3, 150 * time.Millisecond, (*crashRun).opSubmit},
	{"cancel", 1, 60 * time.Millisecond, (*crashRun).opCancel},
	{"fill", 1, 100 * time.Millisecond, (*crashRun).opFill},
	{"unfill", 1, 60 * time.Millisecond, (*crashRun).opUnfill},
	{"lease", 1, 30 * time.Millisecond, (*crashRun).opLease},
}

// TestCrashRandomWorkload runs a randomized mixed workload under the real
// daemon binary (simulated GPUs, the fake cuda-checkpoint with delays so
// that kills land inside freezes and thaws, real CRIU) and kill -9s the
// daemon at random points, some inside an operation (a freeze, a dump, a
// restore, a dispatch). After every restart it checks the invariants in
// crash_invariants_test.go; at the end every frozen and hibernated process
// is thawed with its memory verified and every job accounted for.
func TestCrashRandomWorkload(t *testing.T) {
	criu := testutil.CRIU(t)
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash test: seed %d, %d operations (replay with -crash.seed %d)", seed, *crashOps, seed)

	h := prepareCkpt(t, config.DriverCLI, func(c *config.Config) {
		c.CRIU = criu
		c.Sim = "2x8G"
	})
	h.faults(`{"lock": {"delay_ms": 10}, "checkpoint": {"delay_ms": 40}, "restore": {"delay_ms": 40}, "unlock": {"delay_ms": 10}}`)
	r := &crashRun{t: t, h: h, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		marks: filepath.Join(h.dir, "marks"), jobs: map[string]bool{}, results: map[string]map[string]int{},
		user: testutil.NewUser(t, "gscrash1", "gscrash").Name}
	if err := os.MkdirAll(r.marks, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.killLeftovers)
	r.startDaemon()
	reg, err := simgpu.Open(h.cfg.SimDir)
	if err != nil {
		t.Fatal(err)
	}
	h.reg = reg

	for i := 0; i < *crashOps; i++ {
		op := r.pick()
		r.ops++
		if r.rng.Float64() < *crashKill {
			r.crashDuring(op)
		} else {
			r.record(op.name, r.call(op))
		}
	}
	r.crash("after the last operation")
	r.drain()
	r.summary()
	if len(r.violations) > 0 {
		t.Fatalf("%d invariant violations:\n%s", len(r.violations), strings.Join(r.violations, "\n"))
	}
}

// crashRun is the state of one crash test: the daemon, what the workload
// created and what it saw.
type crashRun struct {
	t     *testing.T
	h     *ckptHarness
	rng   *rand.Rand
	dp    *daemonProc
	since time.Time // when the daemon now running was started
	marks string    // each job appends a line to marks/<name> when it starts
	user  string    // an unprivileged user half the processes run as

	seq        int
	jobs       map[string]bool // submitted jobs: true once the daemon acknowledged
	lease      *api.Client     // the connection holding a lease, if any
	ops        int
	crashes    int
	thawed     int            // frozen and hibernated processes thawed at the end
	inFlight   map[string]int // crashes by the operation they cut short
	results    map[string]map[string]int
	violations []string
}

func (r *crashRun) pick() crashOp {
	total := 0
	for _, op := range crashOpsMix {
		total += op.weight
	}
	n := r.rng.IntN(total)
	for _, op := range crashOpsMix {
		if n < op.weight {
			return op
		}
		n -= op.weight
	}
	panic("unreachable")
}

// call runs op on a fresh connection with a deadline.
func (r *crashRun) call(op crashOp) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := api.Dial(ctx, r.h.cfg.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return op.do(r, c, ctx)
}

// record counts an operation's outcome by its wire code.
func (r *crashRun) record(op string, err error) {
	code := "ok"
	if errors.Is(err, errNoTarget) {
		code = "no target"
	} else if err != nil {
		code = string(api.CodeOf(err))
		if code == "" {
			code = "transport"
		}
	}
	if r.results[op] == nil {
		r.results[op] = map[string]int{}
	}
	r.results[op][code]++
	if code == string(api.CodeInternal) || code == string(api.CodeInvalidArgument) || code == string(api.CodeConflict) {
		r.t.Logf("%s: %v", op, err)
	}
}

// crashDuring starts op and kill -9s the daemon at a random point of it.
func (r *crashRun) crashDuring(op crashOp) {
	// The random delay is the kill point, not a wait for anything.
	delay := time.Duration(r.rng.Int64N(int64(op.span)))
	done := make(chan error, 1)
	go func() { done <- r.call(op) }()
	time.Sleep(delay)
	select {
	case err := <-done:
		r.record(op.name, err)
		r.crash("after " + op.name)
	default:
		if r.inFlight == nil {
			r.inFlight = map[string]int{}
		}
		r.inFlight[op.name]++
		r.killDaemon()
		r.record(op.name+" (cut short)", <-done) // the connection broke with the daemon
		r.restart("during " + op.name)
	}
}

// crash kill -9s the daemon, starts the next one and checks the invariants.
func (r *crashRun) crash(when string) {
	r.t.Helper()
	r.killDaemon()
	r.restart(when)
}

func (r *crashRun) killDaemon() {
	r.crashes++
	_ = r.dp.cmd.Process.Kill()
	_ = r.dp.cmd.Wait()
}

// restart starts the next daemon and checks the invariants.
func (r *crashRun) restart(when string) {
	r.t.Helper()
	if r.lease != nil {
		r.lease.Close()
		r.lease = nil
	}
	r.startDaemon()
	for _, v := range r.check() {
		r.violations = append(r.violations, fmt.Sprintf("crash %d (%s): %s", r.crashes, when, v))
	}
}

// startDaemon runs the daemon binary and waits for its READY=1.
func (r *crashRun) startDaemon() {
	r.t.Helper()
	n := testutil.NewNotify(r.t, r.h.dir)
	r.since = time.Now()
	r.dp = r.h.spawnBinary(exec.Command(r.h.bins.Daemon, r.h.binaryArgs()...), "NOTIFY_SOCKET="+n.Path)
	n.WaitFor(r.t, "READY=1", 60*time.Second)
}

// name returns a fresh name with prefix.
func (r *crashRun) name(prefix string) string {
	r.seq++
	return fmt.Sprintf("%s%d", prefix, r.seq)
}

// target picks one process in one of states, not a job's, or fails with
// errNoTarget.
func (r *crashRun) target(ctx context.Context, c *api.Client, states ...api.State) (string, error) {
	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		return "", err
	}
	var names []string
	for _, p := range ps {
		if p.Job == "" && slices.Contains(states, p.State) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "", errNoTarget
	}
	sort.Strings(names)
	return names[r.rng.IntN(len(names))], nil
}

func (r *crashRun) opRun(c *api.Client, ctx context.Context) error {
	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		return err
	}
	live := 0
	for _, p := range ps {
		if p.State != api.StateExited && p.State != api.StateHibernated {
			live++
		}
	}
	if live >= 6 {
		return errNoTarget
	}
	vram := []int{256, 512, 1024, 2048}[r.rng.IntN(4)]
	p := api.RunParams{Name: r.name("p"), Dir: "/", GPU: &api.GPURef{Index: r.rng.IntN(2)},
		Cmd: []string{r.h.bins.SimJob, "--vram", fmt.Sprint(vram), "--host-mem", "4", "--tick", "0.05"}}
	if r.rng.IntN(2) == 0 {
		p.User = r.user // the sandbox of a non-root tree: hibernated and forked as its owner
	}
	_, err = c.Run(ctx, p)
	return err
}

func (r *crashRun) opKill(c *api.Client, ctx context.Context) error {
	name, err := r.target(ctx, c, api.StateRunning, api.StateFrozen, api.StateLocked, api.StateFailed, api.StateHibernated)
	if err == nil {
		_, err = c.Kill(ctx, api.KillParams{Name: name})
	}
	return err
}

func (r *crashRun) opFreeze(c *api.Client, ctx context.Context) error {
	name, err := r.target(ctx, c, api.StateRunning, api.StateLocked, api.StateFailed)
	if err == nil {
		_, err = c.Freeze(ctx, api.FreezeParams{Name: name})
	}
	return err
}

func (r *crashRun) opThaw(c *api.Client, ctx context.Context) error {
	name, err := r.target(ctx, c, api.StateFrozen, api.StateHibernated, api.StateLocked, api.StateFailed)
	if err == nil {
		_, err = c.Thaw(ctx, api.ThawParams{Name: name})
	}
	return err
}

func (r *crashRun) opSwap(c *api.Client, ctx context.Context) error {
	a, err := r.target(ctx, c, api.StateRunning)
	if err != nil {
		return err
	}
	b, err := r.target(ctx, c, api.StateFrozen)
	if err == nil {
		_, err = c.Swap(ctx, api.SwapParams{Freeze: a, Thaw: b})
	}
	return err
}

func (r *crashRun) opHibernate(c *api.Client, ctx context.Context) error {
	name, err := r.target(ctx, c, api.StateRunning, api.StateFrozen)
	if err == nil {
		_, err = c.Hibernate(ctx, api.HibernateParams{Name: name})
	}
	return err
}

// opFork copies a process that has filled its host memory (so that the
// copy's memory can be verified), never a copy.
func (r *crashRun) opFork(c *api.Client, ctx context.Context) error {
	name, err := r.target(ctx, c, api.StateRunning, api.StateFrozen)
	if err != nil {
		return err
	}
	if lines, err := c.Logs(ctx, name, -1); err != nil || strings.Contains(name, "-") ||
		!strings.Contains(strings.Join(lines, "\n"), "simjob: host memory 4 MiB filled") {
		return errNoTarget
	}
	_, err = c.Fork(ctx, api.ForkParams{Name: name, Copies: 1})
	return err
}

// opSubmit queues a short job that marks each start of it, so that a job
// run twice shows.
func (r *crashRun) opSubmit(c *api.Client, ctx context.Context) error {
	name := r.name("task")
	r.jobs[name] = false
	script := fmt.Sprintf("echo started >> %s && exec %s --vram 512 --hold %.1f",
		filepath.Join(r.marks, name), r.h.bins.SimJob, 0.2+r.rng.Float64())
	_, err := c.Submit(ctx, api.SubmitParams{JobSpec: api.JobSpec{Name: name, Dir: "/", VRAM: api.VRAM{MiB: 512},
		Cmd: []string{"sh", "-c", script}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}})
	if err == nil {
		r.jobs[name] = true
	}
	return err
}

func (r *crashRun) opCancel(c *api.Client, ctx context.Context) error {
	jobs, err := c.Jobs(ctx, api.JobsParams{})
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return errNoTarget
	}
	_, err = c.Cancel(ctx, jobs[r.rng.IntN(len(jobs))].Name)
	return err
}

func (r *crashRun) opFill(c *api.Client, ctx context.Context) error {
	_, err := c.Fill(ctx, api.FillParams{GPU: &api.GPURef{Index: r.rng.IntN(2)}, Ratio: 0.3 + 0.4*r.rng.Float64()})
	return err
}

func (r *crashRun) opUnfill(c *api.Client, ctx context.Context) error {
	_, err := c.Unfill(ctx, api.GPURef{Index: r.rng.IntN(2)})
	return err
}

// opLease acquires a lease on a connection kept open until the next
// lease operation or crash, or releases the one held.
func (r *crashRun) opLease(_ *api.Client, ctx context.Context) error {
	if r.lease != nil {
		l := r.lease
		r.lease = nil
		defer l.Close()
		leases, err := l.Leases(ctx)
		if err != nil {
			return err
		}
		if len(leases) == 0 {
			return errNoTarget
		}
		_, err = l.Release(ctx, leases[0].ID)
		return err
	}
	c, err := api.Dial(ctx, r.h.cfg.Socket)
	if err != nil {
		return err
	}
	if _, err := c.Acquire(ctx, api.AcquireParams{MinFree: api.VRAM{MiB: 1024}}); err != nil {
		c.Close()
		return err
	}
	r.lease = c
	return nil
}

// summary logs the run's figures.
func (r *crashRun) summary() {
	var ops []string
	for op := range r.results {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	for _, op := range ops {
		var codes []string
		for code, n := range r.results[op] {
			codes = append(codes, fmt.Sprintf("%s %d", code, n))
		}
		sort.Strings(codes)
		fmt.Fprintf(&b, "\n  %-20s %s", op, strings.Join(codes, ", "))
	}
	inFlight := 0
	for _, n := range r.inFlight {
		inFlight += n
	}
	r.t.Logf("crash test: %d operations, %d crashes (%d inside an operation: %v), %d jobs, %d processes thawed and verified at the end, %d invariant violations; outcomes:%s",
		r.ops, r.crashes, inFlight, r.inFlight, len(r.jobs), r.thawed, len(r.violations), b.String())
}
