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
	cuts := warnings.FilterMessage("cut the logs of a user's live processes, over --max-log-bytes-per-user").All()
	if len(cuts) == 0 {
		t.Fatal("the daemon logged no cut")
	}
	for _, e := range cuts {
		if u := e.ContextMap()["user"]; u != alice.Name {
			t.Errorf("a cut of %v's logs; only %s's are over the budget", u, alice.Name)
		}
	}
}
