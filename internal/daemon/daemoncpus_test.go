package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDaemonCPUsHoldTheDaemonNotWhatItStarts: with --daemon-cpus every
// thread of the built daemon runs on those CPUs, and what it starts for a
// user runs on the others: a real user's managed tree (supervisor and
// command), the tree CRIU restores from disk, memory verified, and a
// filler's helper. A client on the daemon's CPUs alone is refused a tree.
func TestDaemonCPUsHoldTheDaemonNotWhatItStarts(t *testing.T) {
	daemonCPUs, userCPUs := testutil.CPUsApart(t)
	u := testutil.NewUser(t, "gsdcpuu", "gsdcpu")
	criu := testutil.CRIU(t)
	h := prepareHarness(t, func(c *config.Config) {
		c.Group, c.DaemonCPUs = u.Group, daemonCPUs
		c.CheckpointDriver, c.Sim, c.CRIU = config.DriverSim, "1x24G", criu
	})
	dp := h.startBinary()
	daemon := dp.cmd.Process.Pid
	testutil.WantThreadsOn(t, "the daemon", daemon, daemonCPUs)

	h.mustCtl(u, "run", "--dir", "/", "job", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "16", "--tick", "0.02")
	h.followCount("job", "tick 3", 1)
	p, err := h.client().Process(ctxT(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "the job's supervisor", p.InitPID, userCPUs)
	testutil.WantThreadsOn(t, "the job's command", p.PID, userCPUs)

	h.mustCtl(u, "hibernate", "job")
	h.mustCtl(u, "thaw", "job")
	if p, err = h.client().Process(ctxT(t), "job"); err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "the restored supervisor", p.InitPID, userCPUs)
	testutil.WantThreadsOn(t, "the restored command", p.PID, userCPUs)
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job", Signal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	h.followCount("job", "simjob: host memory verified", 1)
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "the filler's helper", f.PID, userCPUs)
	testutil.WantThreadsOn(t, "the daemon, after", daemon, daemonCPUs)

	// A client with none of the users' CPUs: refused, nothing started.
	want := "no CPU for the tree: the calling process may run only on CPUs " + daemonCPUs + ", and the daemon runs users' processes on " + userCPUs + " only; send the request from a process that may run on one of those (invalid_argument)"
	for _, args := range [][]string{
		{"run", "--dir", "/", "apart", "--", "sleep", "1000"},
		{"submit", "--dir", "/", "--name", "apart", "--", "sleep", "1000"},
	} {
		if _, stderr, code := h.ctlOn(u, daemonCPUs, args...); code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("%s from CPUs %s: exit %d, %q; want refused saying %q", args[0], daemonCPUs, code, stderr, want)
		}
	}
	if out := h.mustCtl(u, "ps", "-a"); strings.Contains(out, "apart") {
		t.Errorf("a refused run left a record:\n%s", out)
	}
	if out := h.mustCtl(u, "jobs", "--all"); strings.Contains(out, "apart") {
		t.Errorf("a refused submit left a job:\n%s", out)
	}
}

// TestDaemonCPUsItMayNotUse: a --daemon-cpus naming no CPU the daemon may
// run on stops its start with a sentence naming the setting and the CPUs
// it may use; a malformed list is refused as bad configuration.
func TestDaemonCPUsItMayNotUse(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.IsSet(1023) {
		t.Skip("this machine has CPU 1023")
	}
	h := prepareHarness(t)
	for _, tc := range []struct{ list, want string }{
		{"1023", `--daemon-cpus "1023": none of these CPUs is one this process may run on (` + cpuaffinity.Format(all) + ")"},
		{"2-1", `--daemon-cpus "2-1": range "2-1" runs backwards`},
	} {
		cmd := exec.Command(h.bins.Daemon, append(h.binaryArgs(), "--daemon-cpus", tc.list)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err == nil || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("gpuschedd --daemon-cpus %s: %v, stderr %q; want it to stop saying %q", tc.list, err, stderr.String(), tc.want)
		}
		if _, err := os.Stat(h.cfg.Socket); err == nil {
			t.Errorf("gpuschedd --daemon-cpus %s left a socket", tc.list)
		}
	}
}
