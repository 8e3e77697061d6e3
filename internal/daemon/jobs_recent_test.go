package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestJobsListsRecentlyFinished: a newcomer's submit of a job that can
// never fit fails with why and queues nothing; a job that ends stays in
// the default `jobs` listing for --recent, with its state and reason.
func TestJobsListsRecentlyFinished(t *testing.T) {
	u := testutil.NewUser(t, "gsfr2", "gsfr")
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = "gsfr" })
	ctl := func(args ...string) (string, string, int) {
		t.Helper()
		return h.ctlAs(u, args...)
	}
	if out, errOut, code := ctl("submit", "--name", "huge", "--vram", "30G", "--", "true"); code != 1 ||
		!strings.Contains(errOut, `submit "huge": can never start on this machine: needs 30720+512 MiB on 1 GPU`) {
		t.Fatalf("submit of a job that can never fit: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := ctl("submit", "--name", "oops", "--", "false"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := ctl("job", "wait", "oops"); code == 0 {
		t.Fatalf("job wait of a failing job exited 0: %q", errOut)
	}
	out, errOut, code := ctl("jobs")
	if code != 0 || strings.Contains(out, "huge") || !strings.Contains(out, "oops") || !strings.Contains(out, "failed") {
		t.Fatalf("jobs: exit %d, %q %q; want oops, failed, listed and nothing of huge", code, out, errOut)
	}
	if out, _, _ := ctl("jobs", "--recent", "0"); strings.Contains(out, "oops") {
		t.Fatalf("jobs --recent 0 lists a finished job:\n%s", out)
	}

	c := h.client()
	for _, c2 := range []struct {
		p    api.JobsParams
		want int
	}{
		{api.JobsParams{Recent: api.Duration(time.Hour)}, 1},
		{api.JobsParams{Recent: api.Duration(time.Nanosecond)}, 0},
		{api.JobsParams{}, 0},
	} {
		jobs, err := c.Jobs(ctxT(t), c2.p)
		if err != nil || len(jobs) != c2.want {
			t.Fatalf("jobs %+v: %d jobs (%v), want %d", c2.p, len(jobs), err, c2.want)
		}
	}
	for _, p := range []api.JobsParams{
		{Recent: api.Duration(time.Hour), All: true},
		{Recent: api.Duration(time.Hour), State: api.JobFailed},
		{Recent: api.Duration(time.Hour), States: []api.JobState{api.JobsFinished}},
	} {
		_, err := c.Jobs(ctxT(t), p)
		wantCode(t, err, api.CodeInvalidArgument)
	}
}
