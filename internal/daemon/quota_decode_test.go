package daemon

import (
	"encoding/json"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQuotaCapsBeforeDecode: a user at --max-procs-per-user who sends
// runs (and forks), or at --max-jobs-per-user who sends submits, each with
// a command of 25,000 arguments (270 KiB), is refused with
// resource_exhausted naming the cap before the command is decoded: the
// daemon allocates per refused request what reading the line and
// answering take, not one string per argument. Nothing changes.
func TestQuotaCapsBeforeDecode(t *testing.T) {
	const args = 25000
	// maxAllocs per refused request, both ends together: reading the line,
	// the envelope, the refusal, the test's own write and read. Decoding
	// the command alone would be one allocation per argument.
	const maxAllocs = 2000
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) {
		c.Group = quoGroup
		c.Limits.ProcsPerUser = 1
		c.Limits.JobsPerUser = 1
	})
	h.mustCtl(alice, "run", "--dir", "/", "a1", "--", "sleep", "1000")
	h.mustCtl(alice, "submit", "--name", "queued", "--vram", "1G", "--dir", "/", "--", "sleep", "1000")
	records, jobs := len(h.d.table.View().Records), len(h.d.jobs.View())

	cmd := make([]string, args)
	for i := range cmd {
		cmd[i] = "argument"
	}
	cmd[0] = "true"
	u, err := user.Lookup(quoAlice)
	if err != nil {
		t.Fatal(err)
	}
	rc := h.rawAs(u, strconv.FormatUint(uint64(alice.GroupGID), 10))
	for _, req := range []struct {
		method, flag string
		params       any
	}{
		{api.MethodRun, flagProcs, api.RunParams{Name: "big", Cmd: cmd, Dir: "/"}},
		{api.MethodSubmit, flagJobs, api.SubmitParams{JobSpec: api.JobSpec{Name: "big", Cmd: cmd, Dir: "/", VRAM: api.VRAM{MiB: 1024}}}},
	} {
		b, err := json.Marshal(api.Request{Method: req.method, Params: mustJSON(t, req.params)})
		if err != nil {
			t.Fatal(err)
		}
		line := string(b)
		var wrong map[string]any // the first answer that is not the refusal
		allocs := testing.AllocsPerRun(10, func() {
			rc.send(line)
			resp := rc.recv()
			if msg, _ := resp["error"].(string); wrong == nil && (resp["code"] != string(api.CodeResourceExhausted) || !strings.Contains(msg, "--"+req.flag) || !strings.Contains(msg, quoAlice)) {
				wrong = resp
			}
		})
		if wrong != nil {
			t.Errorf("%s of %d KiB at the cap: %.300v; want resource_exhausted naming %s and --%s", req.method, len(line)>>10, wrong, quoAlice, req.flag)
			continue
		}
		t.Logf("%s of %d KiB at the cap: %.0f allocations per refused request", req.method, len(line)>>10, allocs)
		if allocs > maxAllocs {
			t.Errorf("%s of %d arguments (%d KiB) at the cap: %.0f allocations per refused request; want at most %d (the command is decoded before the cap is checked)",
				req.method, args, len(line)>>10, allocs, maxAllocs)
		}
	}
	if r, j := len(h.d.table.View().Records), len(h.d.jobs.View()); r != records || j != jobs {
		t.Errorf("refused requests changed the table: %d records (were %d), %d jobs (were %d)", r, records, j, jobs)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
