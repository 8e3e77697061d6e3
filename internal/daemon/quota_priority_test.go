package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQuotaUserMaxPriority: past --user-max-priority a user's job (alone
// or in a batch), lease and process policy (run, set) are refused with
// resource_exhausted naming the user and the flag, and nothing is queued
// or changed; at the cap they are accepted. Root is not held to it.
func TestQuotaUserMaxPriority(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.MaxPriority = 10 })
	const flag = "user-max-priority"
	_, stderr, code := h.ctlAs(alice, "submit", "--priority", "11", "--dir", "/", "--", "sleep", "1000")
	wantExhausted(t, "submit above the cap", stderr, code, quoAlice, flag)
	_, stderr, code = h.ctlWith(alice, nil, "[priority=10] sleep 1000\n[priority=11] sleep 1000\n", "submit", "--dir", "/", "--file", "-")
	wantExhausted(t, "a batch with one job above the cap", stderr, code, quoAlice, flag)
	if n := len(h.d.jobs.View()); n != 0 {
		t.Fatalf("refused submissions queued %d jobs", n)
	}
	h.mustCtl(alice, "submit", "--priority", "10", "--dir", "/", "--", "sleep", "1000")

	_, stderr, code = h.ctlAs(alice, "acquire", "--priority", "11", "--min-free", "1G")
	wantExhausted(t, "acquire above the cap", stderr, code, quoAlice, flag)

	rc := h.rawAsUser(alice)
	wantRawExhausted(t, "run with a policy priority above the cap",
		rc.call(api.MethodRun, api.RunParams{Name: "hi", Cmd: []string{"sleep", "1000"}, Dir: "/", Priority: 11}), quoAlice, flag)
	if _, ok := h.record("hi"); ok {
		t.Fatal("a refused run started")
	}
	h.mustCtl(alice, "run", "--dir", "/", "p", "--", "sleep", "1000")
	_, stderr, code = h.ctlAs(alice, "set", "p", "--priority", "11")
	wantExhausted(t, "set above the cap", stderr, code, quoAlice, flag)
	h.mustCtl(alice, "set", "p", "--priority", "-6")
	if r, _ := h.record("p"); r.Policy.Priority != -6 {
		t.Errorf("p's priority is %d after set -6", r.Policy.Priority)
	}

	if resp := h.raw().call(api.MethodAcquire, api.AcquireParams{MinFree: api.VRAM{MiB: 1024}, Priority: 500}); resp["ok"] != true {
		t.Errorf("root's lease at priority 500: %v", resp)
	}
	if _, err := h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Cmd: []string{"sleep", "1000"}, Dir: "/", Priority: 500}}); err != nil {
		t.Errorf("root's job at priority 500: %v", err)
	}
}
