package daemon

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestTreeKeepsCallerCPUs: a real user's tree runs on the CPUs of the
// client that asked for it (taskset), and so do the copy CRIU restores
// from disk (CRIU restores no affinity), memory verified, fork's copy,
// and a job submitted from there; a client on every CPU keeps none.
// Without it, each ran on every CPU the daemon may use.
func TestTreeKeepsCallerCPUs(t *testing.T) {
	_, pinned := testutil.CPUsApart(t)
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		t.Fatal(err)
	}
	all := cpuaffinity.Format(own) // the daemon's, in this process
	u := testutil.NewUser(t, "gscpuku", "gscpuk")
	criu := testutil.CRIU(t)
	h := prepareHarness(t, func(c *config.Config) {
		c.Group = u.Group
		c.CheckpointDriver, c.Sim, c.CRIU = config.DriverSim, "1x24G", criu
	})
	h.start()

	if _, stderr, code := h.ctlOn(u, pinned, "run", "--dir", "/", "job", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "16", "--tick", "0.02"); code != 0 {
		t.Fatalf("run on CPUs %s: exit %d: %s", pinned, code, stderr)
	}
	h.followCount("job", "tick 3", 1)
	p, err := h.client().Process(ctxT(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	if p.CPUs != pinned {
		t.Errorf("the job's cpus = %q, want %q", p.CPUs, pinned)
	}
	if out := h.mustCtl(u, "status", "job"); !strings.Contains(out, "cpus:") || !strings.Contains(out, pinned+" (its caller's)") {
		t.Errorf("status job says nothing of its CPUs:\n%s", out)
	}
	testutil.WantThreadsOn(t, "the job's supervisor", p.InitPID, pinned)
	testutil.WantThreadsOn(t, "the job's command", p.PID, pinned)

	h.mustCtl(u, "hibernate", "job")
	h.mustCtl(u, "thaw", "job") // from an unpinned client: the tree's CPUs are its own
	if p, err = h.client().Process(ctxT(t), "job"); err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "the restored supervisor", p.InitPID, pinned)
	testutil.WantThreadsOn(t, "the restored command", p.PID, pinned)
	h.mustCtl(u, "fork", "job", "--copies", "1")
	copied, err := h.client().Process(ctxT(t), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "fork's copy", copied.PID, pinned)
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job-1", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("job-1")
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job", Signal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	h.followCount("job", "simjob: host memory verified", 1)
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("job") // its GPU free for the job below

	if _, stderr, code := h.ctlOn(u, pinned, "submit", "--dir", "/", "--name", "queued", "--", "sleep", "1000"); code != 0 {
		t.Fatalf("submit on CPUs %s: exit %d: %s", pinned, code, stderr)
	}
	h.mustCtl(u, "run", "--dir", "/", "free", "--", "sleep", "1000")
	var queued *api.Job
	waitFor(t, func() bool {
		queued, err = h.client().Job(ctxT(t), "queued")
		return err == nil && queued.State == api.JobRunning
	})
	if queued.CPUs != pinned {
		t.Errorf("the job's cpus = %q, want %q", queued.CPUs, pinned)
	}
	for name, want := range map[string]string{"queued": pinned, "free": all} {
		p, err := h.client().Process(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WantThreadsOn(t, name+"'s command", p.PID, want)
		if name == "free" && p.CPUs != "" {
			t.Errorf("%s, from a client on every CPU, keeps cpus %q", name, p.CPUs)
		}
	}
}
