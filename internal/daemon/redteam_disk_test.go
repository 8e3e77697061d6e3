package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// creds are the credential lines of /proc/<pid>/status: uids, gids,
// groups and every capability set.
func creds(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:"} {
			if strings.HasPrefix(l, k) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// treeCreds are the credentials of name's supervisor and command.
func (h *ckptHarness) treeCreds(t *testing.T, name string) [2]string {
	p := h.proc(name)
	return [2]string{creds(t, p.InitPID), creds(t, p.PID)}
}

// TestNonRootDiskTier: a real unprivileged user hibernates, thaws from disk
// (lazily, served by our lazy-pages server) and forks its own process
// through the CLI; each restored tree runs with exactly the uid, gids and
// capabilities it had, with its host memory verified by the job itself,
// and another user reaches neither the snapshot's records nor its files.
func TestNonRootDiskTier(t *testing.T) {
	owner := testutil.NewUser(t, "gsdisk1", "gsdisk")
	other := testutil.NewUser(t, "gsdisk2", "gsdisk")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsdisk"; c.LazyRestore = true })
	ctl := func(u testutil.User, args ...string) string {
		t.Helper()
		out, errOut, code := h.ctlAs(u, args...)
		if code != 0 {
			t.Fatalf("gpuschedctl %v as %s: exit %d: %s", args, u.Name, code, errOut)
		}
		return out
	}
	ctl(owner, "run", "job", "--gpu", "0", "--", h.bins.SimJob, "--vram", "512", "--host-mem", "64", "--tick", "0.02")
	h.followCount("job", "simjob: host memory", 1)
	h.followCount("job", "tick 3", 1)
	before := h.treeCreds(t, "job")
	if !strings.Contains(before[1], fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", owner.UID)) ||
		!strings.Contains(before[1], "CapEff:\t0000000000000000") {
		t.Fatalf("command runs with\n%s", before[1])
	}

	ctl(owner, "hibernate", "job")
	p := h.proc("job")
	if p.State != api.StateHibernated || p.Snapshot == "" {
		t.Fatalf("after hibernate: %+v", p)
	}
	snapDir := filepath.Join(h.cfg.Snapshots(), p.Snapshot)
	checkRootOnly(t, snapDir, other)
	checkOwnersKdat(t, snapDir, owner)
	if out := ctl(other, "--json", "snapshots"); strings.Contains(out, p.Snapshot) {
		t.Fatalf("the other user sees the snapshot: %s", out)
	}
	for _, args := range [][]string{{"thaw", "job"}, {"fork", "job", "--copies", "1"}, {"rm", "job"}, {"snapshot", "rm", p.Snapshot}} {
		if _, errOut, code := h.ctlAs(other, args...); code == 0 {
			t.Fatalf("%v as the other user succeeded", args)
		} else if !strings.Contains(errOut, string(api.CodePermissionDenied)) && !strings.Contains(errOut, string(api.CodeNotFound)) {
			t.Fatalf("%v as the other user: %s", args, errOut)
		}
	}

	ticks := h.lastTick("job")
	ctl(owner, "thaw", "job")
	if after := h.treeCreds(t, "job"); after != before {
		t.Fatalf("restored tree runs with\n%s\n%s\nwant\n%s\n%s", after[0], after[1], before[0], before[1])
	}
	h.verifyContinued("job", ticks)
	if h.d.criu.Lazy() {
		if b, err := os.ReadFile(filepath.Join(snapDir, lazypages.LogName)); err != nil || !strings.Contains(string(b), "lazy pages of 2 processes in") {
			t.Fatalf("the thaw was not served by the lazy-pages server: %v %q", err, b)
		}
		fi, err := os.Stat(filepath.Join(snapDir, lazypages.LogName))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("the lazy-pages server's log: %v, uid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}

	ctl(owner, "fork", "job", "--copies", "1")
	if got := h.treeCreds(t, "job-1"); got != before {
		t.Fatalf("fork copy runs with\n%s\n%s\nwant\n%s\n%s", got[0], got[1], before[0], before[1])
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job-1", Signal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	h.followCount("job-1", "simjob: host memory verified", 1)
	if n := strings.Count(strings.Join(mustLogs(t, h, "job"), "\n"), "simjob: host memory verified"); n != 1 {
		t.Fatalf("the source's log holds %d verifications: the copy writes into the source's log", n)
	}
}

func mustLogs(t *testing.T, h *ckptHarness, name string) []string {
	lines, err := h.client().Logs(ctxT(t), name, -1)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// checkOwnersKdat checks that the CRIU worker that dumped u's tree into dir
// found the directory for its kernel probe (CRIU warns "$XDG_RUNTIME_DIR
// not set" without it, and probes on every operation), that the probe is
// kept there, and that u can neither list that directory nor open it.
func checkOwnersKdat(t *testing.T, dir string, u testutil.User) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, checkpoint.DumpLog)); err != nil || strings.Contains(string(b), "XDG_RUNTIME_DIR") {
		t.Fatalf("the owner's dump log: %v %q", err, b)
	}
	kdat := filepath.Join(checkpoint.OwnersKdat, "criu.kdat")
	if _, err := os.Stat(kdat); err != nil {
		t.Fatalf("CRIU's kernel probe was not kept: %v", err)
	}
	err := sandbox.AsCaller(sandbox.Cred{UID: u.UID, GID: u.GID, Groups: u.Groups()}, func() error {
		if _, err := os.ReadDir(checkpoint.OwnersKdat); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("list %s as %s: %v, want permission denied", checkpoint.OwnersKdat, u.Name, err)
		}
		if _, err := os.Open(kdat); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("open %s as %s: %v, want permission denied", kdat, u.Name, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// checkRootOnly checks that a snapshot's images are root's and that u can
// neither list nor open them.
func checkRootOnly(t *testing.T, dir string, u testutil.User) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	for _, e := range ents {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().IsRegular() && (st.Uid != 0 || fi.Mode().Perm()&0o077 != 0) {
			t.Errorf("%s: uid %d mode %v", e.Name(), st.Uid, fi.Mode().Perm())
		}
	}
	err = sandbox.AsCaller(sandbox.Cred{UID: u.UID, GID: u.GID, Groups: u.Groups()}, func() error {
		if _, err := os.ReadDir(dir); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("list %s as %s: %v, want permission denied", dir, u.Name, err)
		}
		if _, err := os.Open(filepath.Join(dir, ents[0].Name())); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("open %s as %s: %v, want permission denied", ents[0].Name(), u.Name, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestNonRootDiskTierSDK: the same user hibernates and thaws through the
// Python SDK, run as that user.
func TestNonRootDiskTierSDK(t *testing.T) {
	py := "/usr/bin/python3" // the system's, which every user may run (as make test-python uses)
	if _, err := os.Stat(py); err != nil {
		t.Skip("needs /usr/bin/python3 for the SDK")
	}
	owner := testutil.NewUser(t, "gsdisk1", "gsdisk")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsdisk" })
	sdk := copySDK(t)
	if _, errOut, code := h.ctlAs(owner, "run", "job", "--gpu", "0", "--", h.bins.SimJob, "--vram", "512", "--host-mem", "64", "--tick", "0.02"); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("job", "tick 3", 1)
	before := h.treeCreds(t, "job")
	ticks := h.lastTick("job")
	script := `import json, sys, gpusched
s = gpusched.GpuSched(sys.argv[1])
h = s.hibernate("job")
t = s.thaw("job")
print(json.dumps({"hibernated": h.state, "thawed": t.state}))`
	cmd := exec.Command(py, "-c", script, h.cfg.Socket)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + sdk}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: owner.UID, Gid: owner.GID, Groups: owner.Groups()}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("SDK as %s: %v\n%s", owner.Name, err, out)
	}
	var res struct{ Hibernated, Thawed string }
	if err := json.Unmarshal(out, &res); err != nil || res.Hibernated != string(api.StateHibernated) || res.Thawed != string(api.StateRunning) {
		t.Fatalf("SDK printed %s (%v)", out, err)
	}
	if after := h.treeCreds(t, "job"); after != before {
		t.Fatalf("restored tree runs with\n%s\nwant\n%s", after, before)
	}
	h.verifyContinued("job", ticks)
}

// copySDK copies the Python SDK package where every user may read it.
func copySDK(t *testing.T) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpusched-sdk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "sdk", "python", "gpusched")
	dst := filepath.Join(dir, "gpusched")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(dst, e.Name()), os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			_, err = io.Copy(out, in)
			out.Close()
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRedTeamParasiteMountPoint is vector 6d: CRIU's parasite mounts a
// proc instance on proc.crtools in the working directory of the tree's
// root while it dumps it. That root was the init, in the caller's
// directory: another user who may write there could plant the name (the
// dump failed) or swap it for a symlink (root's parasite would mount over
// its target). The root is now the supervisor, in a private directory:
// the plant is ignored and nothing is mounted.
func TestRedTeamParasiteMountPoint(t *testing.T) {
	other := testutil.NewUser(t, "gsdisk2", "gsdisk")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsdisk" })
	shared := filepath.Join(h.dir, "shared")
	target := filepath.Join(h.dir, "target")
	for _, d := range []string{shared, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	plant := exec.Command("ln", "-s", target, filepath.Join(shared, "proc.crtools"))
	plant.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other.UID, Gid: other.GID, Groups: other.Groups()}}
	if out, err := plant.CombinedOutput(); err != nil {
		t.Fatalf("plant: %v: %s", err, out)
	}
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "job", Dir: shared, GPU: &api.GPURef{Index: 0},
		Cmd: []string{h.bins.SimJob, "--vram", "256", "--host-mem", "16", "--tick", "0.02"}}); err != nil {
		t.Fatal(err)
	}
	h.followCount("job", "tick 3", 1)
	if _, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "job"}); err != nil {
		t.Fatalf("hibernate with a planted proc.crtools: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), target) || strings.Contains(string(mounts), shared) {
		t.Fatalf("something was mounted under the test's directories:\n%s", mounts)
	}
	if l, err := os.Readlink(filepath.Join(shared, "proc.crtools")); err != nil || l != target {
		t.Fatalf("the planted link: %q, %v", l, err)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
}
