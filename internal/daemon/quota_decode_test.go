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

// TestQuotaCapsOnTheHead: a run of more than 64 KiB from a user at
// --max-procs-per-user is refused on the line's id and method alone, not
// read further: one whose command is cut off mid-line (not JSON) is
// refused with resource_exhausted, and its id. Below the cap, or in a
// line of a few bytes, the same cut-off request is malformed.
func TestQuotaCapsOnTheHead(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	bob := testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) {
		c.Group = quoGroup
		c.Limits.ProcsPerUser = 1
	})
	h.mustCtl(alice, "run", "--dir", "/", "a1", "--", "sleep", "1000")
	records := len(h.d.table.View().Records)
	cutOff := func(n int) string {
		return `{"id":7,"method":"run","params":{"name":"big","dir":"/","cmd":["true","` + strings.Repeat("x", n)
	}
	conn := func(u testutil.User) *rawConn {
		pu, err := user.Lookup(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		return h.rawAs(pu, strconv.FormatUint(uint64(u.GroupGID), 10))
	}
	for _, c := range []struct {
		who   testutil.User
		bytes int
		code  api.Code
	}{
		{alice, 200 << 10, api.CodeResourceExhausted},
		{alice, 1 << 10, api.CodeBadRequest},
		{bob, 200 << 10, api.CodeBadRequest},
	} {
		rc := conn(c.who)
		rc.send(cutOff(c.bytes))
		resp := rc.recv()
		if resp["code"] != string(c.code) {
			t.Errorf("%s's run cut off after %d KiB: %.300v; want %s", c.who.Name, c.bytes>>10, resp, c.code)
		}
		if c.code == api.CodeResourceExhausted {
			if msg, _ := resp["error"].(string); resp["id"] != float64(7) || !strings.Contains(msg, "--"+flagProcs) {
				t.Errorf("%s's refusal: %.300v; want id 7 and a sentence naming --%s", c.who.Name, resp, flagProcs)
			}
		}
	}
	if r := len(h.d.table.View().Records); r != records {
		t.Errorf("refused requests changed the table: %d records (were %d)", r, records)
	}
}
