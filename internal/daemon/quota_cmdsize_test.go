package daemon

import (
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQuotaCommandSize: a record keeps its command (a job its environment
// too) for as long as it is kept and returns it in every listing, so run
// and submit refuse, with invalid_argument naming the bound, a command
// and environment past 256 KiB, and any argument or variable execve would
// refuse (over 128 KiB); nothing is recorded. A command just under the
// bound runs.
func TestQuotaCommandSize(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup })
	arg := strings.Repeat("x", 100<<10)
	big := []string{"--", "true", arg, arg, arg} // 300 KiB in all, each argument under 128 KiB
	for _, args := range [][]string{
		append([]string{"run", "--dir", "/", "big"}, big...),
		append([]string{"submit", "--name", "big", "--dir", "/"}, big...),
	} {
		_, stderr, code := h.ctlAs(alice, args...)
		if code == 0 || !strings.Contains(stderr, string(api.CodeInvalidArgument)) || !strings.Contains(stderr, "256 KiB") {
			t.Errorf("%s of a 300 KiB command: exit %d, stderr %.300q; want invalid_argument naming 256 KiB", args[0], code, stderr)
		}
	}

	u, err := user.Lookup(quoAlice)
	if err != nil {
		t.Fatal(err)
	}
	rc := h.rawAs(u, strconv.FormatUint(uint64(alice.GroupGID), 10))
	huge := map[string]string{"HUGE": strings.Repeat("y", 130<<10)}
	for _, req := range []struct {
		method string
		params any
	}{
		{api.MethodRun, api.RunParams{Name: "huge", Cmd: []string{"true"}, Dir: "/", Env: huge}},
		{api.MethodSubmit, api.SubmitParams{JobSpec: api.JobSpec{Name: "huge", Cmd: []string{"true"}, Dir: "/", Env: huge}}},
	} {
		resp := rc.call(req.method, req.params)
		if resp["ok"] == true || resp["code"] != string(api.CodeInvalidArgument) || !strings.Contains(resp["error"].(string), "MAX_ARG_STRLEN") {
			t.Errorf("%s with a 130 KiB variable: %.300v; want invalid_argument naming MAX_ARG_STRLEN", req.method, resp)
		}
	}

	if n := len(h.d.table.View().Records); n != 0 {
		t.Errorf("refused runs left %d records", n)
	}
	if n := len(h.d.jobs.View()); n != 0 {
		t.Errorf("refused submissions queued %d jobs", n)
	}
	h.mustCtl(alice, "run", "--dir", "/", "fits", "--", "true", arg, arg)
	if p := h.waitExit("fits"); p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
		t.Errorf("a 200 KiB command did not run: %+v", p.Exit)
	}
}
