package daemon

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestCtlShowsWhatANewcomerNeeds runs the real gpuschedctl against the
// real daemon: ps lists the live processes only (-a adds the exited
// ones), a frozen or hibernated process shows in parentheses the VRAM it
// needs back, and a job's attempts name their GPUs by index.
func TestCtlShowsWhatANewcomerNeeds(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	root := testutil.User{Name: "root"}
	h.memJob("sleeper", 512, 8)
	if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "sleeper"}); err != nil {
		t.Fatal(err)
	}
	h.jobs("parked", 1, 300)
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "parked"}); err != nil {
		t.Fatal(err)
	}
	h.run("done", "true")
	h.waitExit("done")
	jobs, err := c.Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "j", Cmd: []string{"true"}, Dir: "/", VRAM: api.VRAM{MiB: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.WaitJob(ctxT(t), api.JobWaitParams{Name: jobs[0].ID}, nil); err != nil || j.State != api.JobDone {
		t.Fatalf("job %+v, %v", j, err)
	}

	out, errOut, code := h.ctlAs(root, "ps")
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	if code != 0 || !strings.Contains(lines["sleeper"], " hibernated ") || !strings.Contains(lines["sleeper"], " (512 MiB) ") ||
		!strings.Contains(lines["parked"], " frozen ") || !strings.Contains(lines["parked"], " (300 MiB) ") ||
		lines["done"] != "" || lines["j"] != "" {
		t.Errorf("ps: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	if out, _, _ := h.ctlAs(root, "ps", "-a"); !strings.Contains(out, "\ndone ") || !strings.Contains(out, "\nj ") {
		t.Errorf("ps -a lacks the exited processes:\n%s", out)
	}
	out, errOut, code = h.ctlAs(root, "job", "j")
	_, attempts, _ := strings.Cut(out, "\nATTEMPT")
	if code != 0 || attempts == "" || strings.Contains(attempts, "GPU-") {
		t.Errorf("job: exit %d, stderr %q, attempts by UUID:\n%s", code, errOut, out)
	}
	if out, _, _ := h.ctlAs(root, "job", "j", "--wide"); !strings.Contains(out, "GPU-") {
		t.Errorf("job --wide shows no UUID:\n%s", out)
	}
}
