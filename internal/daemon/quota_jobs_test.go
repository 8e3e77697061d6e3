package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQuotaJobsPerUser: a user capped at five unfinished jobs gets a batch
// that would go past it refused whole, told how many it may still submit;
// of six concurrent submissions at one below the cap exactly one is
// queued; a finished job gives its slot back. Another user and root are
// not held to alice's count.
func TestQuotaJobsPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, quoAlice, quoGroup), testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.JobsPerUser = 5 })
	unfinished := func() int {
		n := 0
		for _, j := range h.d.jobs.View() {
			if j.Owner.UID == alice.UID && !j.State.Terminal() {
				n++
			}
		}
		return n
	}
	_, stderr, code := h.ctlWith(alice, nil, "sleep 1000\nsleep 1000\nsleep 1000\nsleep 1000\n", "submit", "--dir", "/", "--file", "-")
	if code != 0 {
		t.Fatalf("a batch of 4 under a cap of 5: exit %d: %s", code, stderr)
	}
	_, stderr, code = h.ctlWith(alice, nil, "sleep 1000\nsleep 1000\n", "submit", "--dir", "/", "--file", "-")
	wantExhausted(t, "a batch of 2 with 4 of 5 unfinished", stderr, code, quoAlice, "max-jobs-per-user")
	if !strings.Contains(stderr, "may submit 1 more") {
		t.Errorf("the refusal %q does not say how many may still be submitted (1)", stderr)
	}
	if n := unfinished(); n != 4 {
		t.Fatalf("alice has %d unfinished jobs after a refused batch, want 4", n)
	}

	var subs [][]string
	for i := range 6 {
		subs = append(subs, []string{"submit", "--name", fmt.Sprintf("c%d", i), "--dir", "/", "--", "sleep", "1000"})
	}
	queued := 0
	for i, r := range h.ctlConcurrently(alice, subs...) {
		if r.code == 0 {
			queued++
			continue
		}
		wantExhausted(t, fmt.Sprintf("concurrent submit c%d", i), r.stderr, r.code, quoAlice, "max-jobs-per-user")
	}
	if n := unfinished(); queued != 1 || n != 5 {
		t.Fatalf("%d of 6 concurrent submissions queued, alice has %d unfinished; want 1 and 5 (the cap)", queued, n)
	}

	h.mustCtl(bob, "submit", "--dir", "/", "--", "sleep", "1000")
	for range 3 {
		if _, err := h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Cmd: []string{"sleep", "1000"}, Dir: "/"}}); err != nil {
			t.Fatalf("root refused: %v", err)
		}
	}

	for _, j := range h.d.jobs.View() {
		if j.Owner.UID == alice.UID {
			h.mustCtl(alice, "cancel", j.Name)
			break
		}
	}
	h.mustCtl(alice, "submit", "--dir", "/", "--", "sleep", "1000")
	_, stderr, code = h.ctlAs(alice, "submit", "--dir", "/", "--", "sleep", "1000")
	wantExhausted(t, "submit at the cap after a cancel", stderr, code, quoAlice, "max-jobs-per-user")
}

// TestQuotaJobBytesPerUser: one user's unfinished jobs keep at most
// --max-job-bytes-per-user of commands and environments (each job may
// have 256 KiB: 10,000 of them were 2.5 GiB of daemon memory). Past it a
// submission is refused naming the flag and nothing is queued; another
// user and root are not held to alice's total.
func TestQuotaJobBytesPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, quoAlice, quoGroup), testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.JobMiBPerUser = 1 })
	big := strings.Repeat("x", 120<<10) // each job keeps a little over 120 KiB: 8 fit in 1 MiB
	submit := func(u testutil.User) (string, int) {
		_, stderr, code := h.ctlWith(u, nil, "", "submit", "--dir", "/", "--clean-env", "--", "sh", "-c", "exec sleep 1000", big)
		return stderr, code
	}
	for i := range 8 {
		if stderr, code := submit(alice); code != 0 {
			t.Fatalf("job %d of 8 (%d KiB in all): exit %d: %s", i+1, (i+1)*120, code, stderr)
		}
	}
	before := len(h.d.jobs.View())
	stderr, code := submit(alice)
	wantExhausted(t, "a ninth job of 120 KiB past 1 MiB", stderr, code, quoAlice, "max-job-bytes-per-user")
	if n := len(h.d.jobs.View()); n != before {
		t.Fatalf("a refused submission changed the queue: %d jobs, was %d", n, before)
	}
	if stderr, code := submit(bob); code != 0 {
		t.Fatalf("bob refused for alice's total: %s", stderr)
	}
	if _, err := h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Cmd: []string{"sh", "-c", "exec sleep 1000", big}, Dir: "/"}}); err != nil {
		t.Fatalf("root refused: %v", err)
	}
}
