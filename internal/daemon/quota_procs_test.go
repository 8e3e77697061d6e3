package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQuotaProcsConcurrentRuns: eight runs at once by a user capped at
// three live processes start exactly three; the others are refused with
// resource_exhausted naming the user and --max-procs-per-user, and leave
// no record or log; so is a fork, before anything is dumped. Another user
// and root are not held to alice's count, and an exit gives the slot back.
func TestQuotaProcsConcurrentRuns(t *testing.T) {
	alice, bob := testutil.NewUser(t, quoAlice, quoGroup), testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.ProcsPerUser = 3 })
	var runs [][]string
	for i := range 8 {
		runs = append(runs, []string{"run", "--dir", "/", fmt.Sprintf("p%d", i), "--", "sleep", "1000"})
	}
	started := 0
	for i, r := range h.ctlConcurrently(alice, runs...) {
		name := fmt.Sprintf("p%d", i)
		if r.code == 0 {
			started++
			continue
		}
		wantExhausted(t, "run "+name, r.stderr, r.code, quoAlice, "max-procs-per-user")
		if _, ok := h.record(name); ok {
			t.Errorf("refused run %s left a record", name)
		}
		if logs, _ := filepath.Glob(filepath.Join(h.cfg.LogDir, name+"*.log")); len(logs) > 0 {
			t.Errorf("refused run %s left a log", name)
		}
	}
	if live := h.liveOf(alice.UID); started != 3 || live != 3 {
		t.Fatalf("%d of 8 concurrent runs started, %d live; want exactly 3 (the cap)", started, live)
	}

	var src string
	for _, r := range h.d.table.View().Records {
		if r.Owner.UID == alice.UID && r.Live() {
			src = r.Name
		}
	}
	_, stderr, code := h.ctlAs(alice, "fork", src, "--copies", "1")
	wantExhausted(t, "fork at the cap", stderr, code, quoAlice, "max-procs-per-user")
	if _, ok := h.record(src + "-1"); ok {
		t.Errorf("a refused fork left a copy")
	}

	h.mustCtl(bob, "run", "--dir", "/", "bob-1", "--", "sleep", "1000")
	for i := range 4 {
		h.run(fmt.Sprintf("root-%d", i), "sleep", "1000") // root: no cap
	}

	h.mustCtl(alice, "kill", src)
	h.waitExit(src)
	h.mustCtl(alice, "run", "--dir", "/", "again", "--", "sleep", "1000")
	_, stderr, code = h.ctlAs(alice, "run", "--dir", "/", "over", "--", "sleep", "1000")
	wantExhausted(t, "run past the cap after an exit", stderr, code, quoAlice, "max-procs-per-user")
}

// TestQuotaProcsJobsWait: a user at --max-procs-per-user gets no job
// attempt started either: the job stays queued, saying why, and starts
// once one of the user's processes exits.
func TestQuotaProcsJobsWait(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = quoGroup; c.Limits.ProcsPerUser = 2 })
	h.mustCtl(alice, "run", "--dir", "/", "a1", "--", "sleep", "1000")
	h.mustCtl(alice, "run", "--dir", "/", "a2", "--", "sleep", "1000")
	h.mustCtl(alice, "submit", "--name", "aj", "--vram", "1G", "--dir", "/", "--", "sleep", "1000")
	var j *api.Job
	waitFor(t, func() bool { j = h.job("aj"); return j.Reason != "" || j.State != api.JobQueued })
	if j.State != api.JobQueued || !strings.Contains(j.Reason, "user_limit") || !strings.Contains(j.Reason, "--max-procs-per-user") {
		t.Fatalf("job of a user at the cap: %s, reason %q; want queued, waiting on --max-procs-per-user", j.State, j.Reason)
	}
	h.mustCtl(alice, "kill", "a1")
	h.waitJobState("aj", api.JobRunning)
	if live := h.liveOf(alice.UID); live != 2 {
		t.Fatalf("alice has %d live processes, want 2 (the cap)", live)
	}
}
