package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamLogBudget: one user's live processes, each log within
// --log-max-bytes, hold more than --max-log-bytes-per-user together. The
// daemon cuts that user's logs to the budget, saying so in the log it
// empties, and leaves alone another user's log and root's, which hold as
// much each; every process runs on.
func TestRedTeamLogBudget(t *testing.T) {
	const (
		budget  = 1 << 20
		written = 900_000 // by each process, within its own logs: two are past the budget
	)
	alice, bob := testutil.NewUser(t, "gslogb-a", "gslogb"), testutil.NewUser(t, "gslogb-b", "gslogb")
	h := prepareHarness(t, func(c *config.Config) {
		c.Group = alice.Group
		c.LogMaxBytes, c.LogKeep, c.Limits.LogMiBPerUser = 512<<10, 1, budget>>20
	})
	core, warnings := observer.New(zap.WarnLevel)
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.start()
	proc := func(name string) *api.Process {
		t.Helper()
		p, err := h.client().Process(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	script := "yes | head -c " + strconv.Itoa(written) + "; exec sleep 100000"
	var aliceLogs []string
	for _, name := range []string{"a1", "a2", "a3", "a4"} {
		h.mustCtl(alice, "run", "--dir", "/", name, "--", "sh", "-c", script)
		aliceLogs = append(aliceLogs, proc(name).Log)
	}
	h.mustCtl(bob, "run", "--dir", "/", "b1", "--", "sh", "-c", script)
	for _, name := range []string{"r1", "r2", "r3", "r4"} {
		h.run(name, "sh", "-c", script)
	}
	// Each has written all it will once its shell is replaced by sleep.
	for _, name := range []string{"a1", "a2", "a3", "a4", "b1", "r1", "r2", "r3", "r4"} {
		pid := strconv.Itoa(proc(name).PID)
		waitFor(t, func() bool {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return string(comm) == "sleep\n"
		})
	}
	held := func(logs []string) int64 {
		var n int64
		for _, l := range logs {
			n += logfile.Bytes(l, h.cfg.LogKeep)
		}
		return n
	}
	waitFor(t, func() bool { return held(aliceLogs) <= budget })

	for _, name := range []string{"b1", "r1", "r2", "r3", "r4"} {
		if n := logfile.Bytes(proc(name).Log, h.cfg.LogKeep); n != written {
			t.Errorf("%s's logs hold %d bytes, want the %d written: only the user over the budget is cut", name, n, written)
		}
	}
	out := h.mustCtl(alice, "logs", "--lines", "-1", "a1") + h.mustCtl(alice, "logs", "--lines", "-1", "a2") +
		h.mustCtl(alice, "logs", "--lines", "-1", "a3") + h.mustCtl(alice, "logs", "--lines", "-1", "a4")
	if !strings.Contains(out, "gpusched: this log was emptied: the logs of gslogb-a's live processes held") {
		t.Errorf("no log of alice's says it was emptied")
	}
	for _, name := range []string{"a1", "a2", "a3", "a4"} {
		if p := proc(name); p.State != api.StateRunning {
			t.Errorf("%s is %s, want running", name, p.State)
		}
	}
	wantCutsOf(t, warnings, "--max-log-bytes-per-user", alice.Name)
}

// TestRedTeamLogDiskFraction: two users' live processes, each user within
// --max-log-bytes-per-user, hold more than --log-disk-fraction of the log
// directory's filesystem together (a tmpfs of 8 MiB here, half of it for
// users: a share of 2.5 MiB each beside the other's 1.5 MiB). The daemon
// empties the log of the user who holds the most, saying so there, and
// leaves the other user's log and root's alone; every process runs on.
func TestRedTeamLogDiskFraction(t *testing.T) {
	const mib = 1 << 20
	alice, bob := testutil.NewUser(t, "gslogf-a", "gslogf"), testutil.NewUser(t, "gslogf-b", "gslogf")
	h := prepareHarness(t, func(c *config.Config) {
		c.Group = alice.Group
		c.LogMaxBytes, c.LogKeep = 4*mib, 1
		c.Limits.LogMiBPerUser, c.Limits.LogDiskFraction = 1024, 0.5
		c.LogDir = testutil.Tmpfs(t, "log-fraction-live", "8m")
	})
	core, warnings := observer.New(zap.WarnLevel)
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.start()

	write := func(n int) []string {
		return []string{"sh", "-c", "yes | head -c " + strconv.Itoa(n) + "; exec sleep 100000"}
	}
	h.mustCtl(alice, append([]string{"run", "--dir", "/", "a", "--"}, write(3*mib)...)...)
	h.mustCtl(bob, append([]string{"run", "--dir", "/", "b", "--"}, write(3*mib/2)...)...)
	h.run("r", write(mib)...)
	procs := map[string]*api.Process{}
	for _, name := range []string{"a", "b", "r"} {
		p, err := h.client().Process(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = p
		pid := strconv.Itoa(p.PID)
		waitFor(t, func() bool {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return string(comm) == "sleep\n"
		})
	}
	waitFor(t, func() bool { return logfile.Bytes(procs["a"].Log, h.cfg.LogKeep) < 3*mib })

	for name, want := range map[string]int64{"b": 3 * mib / 2, "r": mib} {
		if n := logfile.Bytes(procs[name].Log, h.cfg.LogKeep); n != want {
			t.Errorf("%s's logs hold %d bytes, want the %d written: only the user who holds the most is cut", name, n, want)
		}
	}
	if out := h.mustCtl(alice, "logs", "--lines", "-1", "a"); !strings.Contains(out, "gpusched: this log was emptied: the logs of all users' live processes held") ||
		!strings.Contains(out, "over the daemon's --log-disk-fraction") {
		t.Errorf("alice's log does not say why it was emptied:\n%.300s", out)
	}
	for name := range procs {
		if p, err := h.client().Process(ctxT(t), name); err != nil || p.State != api.StateRunning {
			t.Errorf("%s: %+v, %v; want running", name, p, err)
		}
	}
	wantCutsOf(t, warnings, "--log-disk-fraction", alice.Name)
}

// wantCutsOf checks that the daemon logged cuts of live logs over setting,
// and of user's alone.
func wantCutsOf(t *testing.T, warnings *observer.ObservedLogs, setting, user string) {
	t.Helper()
	cuts := warnings.FilterMessage("cut the logs of a user's live processes, over " + setting).All()
	if len(cuts) == 0 {
		t.Fatalf("the daemon logged no cut over %s", setting)
	}
	for _, e := range cuts {
		if u := e.ContextMap()["user"]; u != user {
			t.Errorf("a cut of %v's logs over %s; only %s's are over it", u, setting, user)
		}
	}
}
