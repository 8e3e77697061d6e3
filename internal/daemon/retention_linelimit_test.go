package daemon

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// paddedLine is the request {"method":method,"params":params} padded with
// JSON whitespace to size bytes, its newline included.
func paddedLine(t *testing.T, method string, params any, size int) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	if len(b)+1 > size {
		t.Fatalf("%s request of %d bytes does not fit in %d", method, len(b)+1, size)
	}
	return string(b[:len(b)-1]) + strings.Repeat(" ", size-len(b)-1) + "}"
}

// TestRetentionRequestsAtLineLimit: rm of several names and prune_jobs,
// as a real user, in a request line of exactly api.MaxLineBytes (newline
// included) are read and answered: 10,001 names are refused naming the
// bound of 10,000, one name is removed, the finished jobs are pruned. One
// byte more is refused too_large, removing nothing, and the connection
// stays usable.
func TestRetentionRequestsAtLineLimit(t *testing.T) {
	const limit = api.MaxLineBytes
	alice := testutil.NewUser(t, retAlice, retGroup)
	h := newQueueHarness(t, "1x24G", func(c *config.Config) { c.Group = retGroup })
	h.runDone(&alice, "keep")
	h.mustCtl(alice, "submit", "--name", "done", "--dir", "/", "--", "true")
	h.waitJob("done")
	rc := h.rawAsUser(alice)
	send := func(line string) map[string]any {
		t.Helper()
		go rc.c.Write([]byte(line + "\n")) // a MiB is more than the socket buffers: read while it goes
		return rc.recv()
	}
	kept := func() bool { return slices.Contains(h.psNames(api.PSParams{}), "keep") }
	jobs := func() int { return len(h.d.jobs.View()) }

	many := make([]string, maxRmNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	many[0] = "keep"
	for _, tc := range []struct {
		what     string
		line     string
		code     api.Code
		says     string
		kept     bool
		jobsLeft int
	}{
		{"rm of 10,001 names at the limit", paddedLine(t, api.MethodRm, api.RmParams{Names: many}, limit), api.CodeInvalidArgument, "at most 10000", true, 1},
		{"rm one byte over the limit", paddedLine(t, api.MethodRm, api.RmParams{Names: []string{"keep"}}, limit+1), api.CodeTooLarge, "request line too long", true, 1},
		{"prune_jobs one byte over the limit", paddedLine(t, api.MethodPruneJobs, api.PruneJobsParams{}, limit+1), api.CodeTooLarge, "request line too long", true, 1},
		{"rm at the limit", paddedLine(t, api.MethodRm, api.RmParams{Names: []string{"keep"}}, limit), "", "", false, 1},
		{"prune_jobs at the limit", paddedLine(t, api.MethodPruneJobs, api.PruneJobsParams{}, limit), "", "", false, 0},
	} {
		resp := send(tc.line)
		msg, _ := resp["error"].(string)
		switch {
		case tc.code == "" && resp["ok"] != true:
			t.Errorf("%s: %.300v; want it done", tc.what, resp)
		case tc.code != "" && (resp["code"] != string(tc.code) || !strings.Contains(msg, tc.says)):
			t.Errorf("%s: %.300v; want %s saying %q", tc.what, resp, tc.code, tc.says)
		}
		if got := kept(); got != tc.kept {
			t.Errorf("%s: process keep there %v, want %v", tc.what, got, tc.kept)
		}
		if got := jobs(); got != tc.jobsLeft {
			t.Errorf("%s: %d jobs left, want %d", tc.what, got, tc.jobsLeft)
		}
		if r := rc.call(api.MethodHello, nil); r["ok"] != true {
			t.Fatalf("after %s: %v", tc.what, r)
		}
	}
}
