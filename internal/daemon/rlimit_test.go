package daemon

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/rlimit"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// ctlLimited runs gpuschedctl as u with its resource limits lowered by
// prlimit(1) options, as a user's shell with those ulimits would.
func (h *harness) ctlLimited(u testutil.User, limits []string, args ...string) (string, string, int) {
	h.t.Helper()
	argv := append(append(limits, "--", h.bins.Ctl, "--socket", h.cfg.Socket), args...)
	cmd := exec.Command("prlimit", argv...)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		h.t.Fatalf("gpuschedctl %v as %s: %v", args, u.Name, err)
	}
	return out.String(), errb.String(), 0
}

// raiseNofile tries to raise the hard NOFILE limit past the caller's 64,
// says whether it could, and stays running.
const raiseNofile = `ulimit -Hn 65 2>/dev/null && echo raised || echo refused; exec sleep 1000`

// checkLimits fails t unless the managed process name runs under exactly
// want, could not raise its hard NOFILE limit, and its supervisor kept the
// daemon's limits.
func (h *harness) checkLimits(name string, want rlimit.Set) {
	h.t.Helper()
	h.followCount(name, "r", 1)
	h.expectLimits(name, want)
	lines, err := h.client().Logs(ctxT(h.t), name, -1)
	if err != nil {
		h.t.Fatal(err)
	}
	if text := strings.TrimSpace(strings.Join(lines, "\n")); text != "refused" {
		h.t.Errorf("raising the hard NOFILE limit past the caller's: %q, want refused", text)
	}
}

// expectLimits fails t unless the command of name runs under exactly want
// and its supervisor under the daemon's limits.
func (h *harness) expectLimits(name string, want rlimit.Set) {
	h.t.Helper()
	p, err := h.client().Process(ctxT(h.t), name)
	if err != nil {
		h.t.Fatal(err)
	}
	got, err := rlimit.Of(p.PID)
	if err != nil {
		h.t.Fatal(err)
	}
	sup, err := rlimit.Of(p.InitPID)
	if err != nil {
		h.t.Fatal(err)
	}
	own, err := rlimit.Of(os.Getpid())
	if err != nil {
		h.t.Fatal(err)
	}
	for res, l := range want {
		if got[res] != l {
			h.t.Errorf("%s: managed process's %s = %+v, want the caller's %+v", name, res, got[res], l)
		}
		if sup[res] != own[res] {
			h.t.Errorf("%s: supervisor's %s = %+v, want the daemon's %+v", name, res, sup[res], own[res])
		}
	}
}

// TestRunKeepsCallersLimits: a user whose shell has lowered ulimits runs a
// process; it runs under exactly those limits, not the daemon's, and
// cannot raise a hard one.
func TestRunKeepsCallersLimits(t *testing.T) {
	u := testutil.NewUser(t, "gsrlimrun", "gsrlim")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	limits, _, want := testutil.CallerLimits(t)
	if _, errOut, code := h.ctlLimited(u, limits, "run", "lim", "--dir", "/", "--", "sh", "-c", raiseNofile); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.checkLimits("lim", want)
}

// TestSubmitKeepsCallersLimits: a job runs under the limits its submitter
// had when it submitted it.
func TestSubmitKeepsCallersLimits(t *testing.T) {
	u := testutil.NewUser(t, "gsrlimsub", "gsrlim")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	limits, _, want := testutil.CallerLimits(t)
	if _, errOut, code := h.ctlLimited(u, limits, "submit", "--name", "limjob", "--dir", "/", "--", "sh", "-c", raiseNofile); code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	(&ckptHarness{harness: h}).waitJobState("limjob", api.JobRunning)
	h.checkLimits("limjob", want)
}

// TestRunRefusedWhenPeerGone: a connection whose connecting process has
// exited (it handed the socket on) cannot start a process: its limits
// cannot be read, and the daemon's are not lent instead.
func TestRunRefusedWhenPeerGone(t *testing.T) {
	u := testutil.NewUser(t, "gsrlimgone", "gsrlim")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	usr, err := user.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	rc := h.rawAs(usr, strconv.FormatUint(uint64(u.GroupGID), 10)) // made by a helper process that has exited
	resp := rc.call(api.MethodRun, map[string]any{"name": "orphan", "cmd": []string{"true"}, "dir": "/"})
	if resp["ok"] != false || resp["code"] != string(api.CodePermissionDenied) || !strings.Contains(resp["error"].(string), "resource limits") {
		t.Fatalf("run over a connection whose process is gone: %v", resp)
	}
	if _, err := h.client().Process(ctxT(t), "orphan"); !api.IsNotFound(err) {
		t.Fatalf("a refused run left a record: %v", err)
	}
}

// TestDiskTierKeepsCallersLimits: a user's process hibernated to disk
// comes back, and forks, under the limits it ran with.
func TestDiskTierKeepsCallersLimits(t *testing.T) {
	u := testutil.NewUser(t, "gsrlimdisk", "gsrlim")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = u.Group })
	limits, _, want := testutil.CallerLimits(t)
	run := []string{"run", "job", "--gpu", "0", "--dir", "/", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "8", "--tick", "0.02"}
	if _, errOut, code := h.ctlLimited(u, limits, run...); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.followCount("job", "tick 3", 1)
	h.expectLimits("job", want)
	for _, args := range [][]string{{"hibernate", "job"}, {"thaw", "job"}, {"fork", "job", "--copies", "1"}} {
		if _, errOut, code := h.ctlAs(u, args...); code != 0 {
			t.Fatalf("%v: %s", args, errOut)
		}
	}
	h.expectLimits("job", want)
	h.expectLimits("job-1", want)
}
