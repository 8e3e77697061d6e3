package daemon

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamThawLeavesLeasesAndJobsTheirMemory: a thaw no longer takes
// GPU memory that another user's lease holds, or that a running job
// declared and has not allocated yet, though the GPU sample shows it free.
// A real user's 2000 MiB thaw onto a 4096 MiB GPU where another user
// leased 3000 MiB is refused, saying so, and waits until the lease ends;
// the same beside root's job that declared 3000 MiB and is still growing
// toward it.
func TestRedTeamThawLeavesLeasesAndJobsTheirMemory(t *testing.T) {
	thawer := testutil.NewUser(t, "gshold1", "gshold")
	leaser := testutil.NewUser(t, "gshold2", "gshold")
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.ThawMarginMiB = "gshold", 100 })
	h.simJobAs(thawer, "f", 2000, 1)
	freeze := func() {
		t.Helper()
		if _, errOut, code := h.ctlAs(thawer, "freeze", "f"); code != 0 {
			t.Fatalf("freeze f: %s", errOut)
		}
	}
	freeze()

	acquire := exec.Command(h.bins.Ctl, "--socket", h.cfg.Socket, "acquire", "--gpu-ids", "0", "--min-free", "3000")
	acquire.Dir, acquire.Env = "/", []string{"PATH=/usr/bin:/bin"}
	acquire.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: leaser.UID, Gid: leaser.GID, Groups: leaser.Groups()}}
	out, err := acquire.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := acquire.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acquire.Process.Kill(); acquire.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("acquire as %s: %q, %v", leaser.Name, line, err)
	}

	const held = "GPU 0 needs 2000 MiB plus a 100 MiB margin, 1096 MiB free (3000 MiB more is held by leases and jobs that have not used it yet)"
	if _, errOut, code := h.ctlAs(thawer, "thaw", "f"); code == 0 || !strings.Contains(errOut, held) {
		t.Fatalf("thaw into another user's lease: exit %d, %q; want it refused: %s", code, errOut, held)
	}
	done := make(chan string, 1)
	go func() {
		_, errOut, _ := h.ctlAs(thawer, "thaw", "f", "--timeout", "2m")
		done <- errOut
	}()
	waitFor(t, func() bool { return h.d.thaws.Waiting() == 1 })
	if err := acquire.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	acquire.Wait()
	h.refresh()
	if errOut := <-done; errOut != "" {
		t.Fatalf("the thaw once the lease ended: %s", errOut)
	}

	freeze()
	h.submit(api.JobSpec{Name: "j", VRAM: api.VRAM{MiB: 3000}, Cmd: h.simjob("--vram", "3000", "--ramp", "600")})
	h.waitJobState("j", api.JobRunning)
	h.refresh()
	if _, errOut, code := h.ctlAs(thawer, "thaw", "f"); code == 0 || !strings.Contains(errOut, "held by leases and jobs that have not used it yet") {
		t.Fatalf("thaw into a running job's declaration: exit %d, %q; want it refused", code, errOut)
	}
	if _, err := h.client().Cancel(ctxT(t), "j"); err != nil {
		t.Fatal(err)
	}
	h.waitJob("j")
	h.refresh()
	if _, errOut, code := h.ctlAs(thawer, "thaw", "f"); code != 0 {
		t.Fatalf("thaw once the job ended: %s", errOut)
	}
}
