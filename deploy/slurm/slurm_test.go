// Package slurm_test runs the Slurm integration scripts (prolog.sh,
// epilog.sh, gpusched-slurm and example-job.sh) against a real gpuschedd on
// simulated GPUs, with the job's user a real unprivileged user (nobody), as
// Slurm would run them: the prolog and epilog as root with SLURM_JOB_ID and
// SLURM_JOB_USER set, the helper and the batch script as the job's user.
// Needs root (the daemon runs processes as other users); skips without.
package slurm_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// node is one machine of the test: a gpuschedd on simulated GPUs, the
// scripts installed in a directory of their own, and a PATH holding the
// project's commands.
type node struct {
	t       *testing.T
	bins    testutil.Binaries
	dir     string
	sock    string
	scripts string     // the deploy/slurm scripts, copied where nobody may run them
	path    string     // PATH for the scripts: our commands first
	nobody  *user.User // the job's user
	groups  []uint32   // its supplementary groups
	daemon  *exec.Cmd
	stderr  *lockedBuffer
}

// newNode starts a daemon with gpus simulated 24 GiB GPUs and extra flags.
// The socket's group is nobody's, so that nobody may connect. (A simulated
// job holds its --vram on every GPU it sees, and a process started without
// --gpu sees them all.)
func newNode(t *testing.T, gpus int, extra ...string) *node {
	t.Helper()
	testutil.RequiresRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("needs the user nobody as the job's user")
	}
	group, err := user.LookupGroupId(nobody.Gid)
	if err != nil {
		t.Skipf("needs a group for nobody's gid %s", nobody.Gid)
	}
	return newNodeFor(t, nobody, nil, group.Name, gpus, extra...)
}

// newNodeFor is newNode with u, in the supplementary groups groups, as the
// job's user, and the socket's group group.
func newNodeFor(t *testing.T, u *user.User, groups []uint32, group string, gpus int, extra ...string) *node {
	t.Helper()
	n := &node{t: t, bins: testutil.Build(t), dir: testutil.ShortDir(t), nobody: u, groups: groups, stderr: &lockedBuffer{}}
	n.sock = filepath.Join(n.dir, "s.sock")

	// Install the scripts as an administrator would: side by side, in a
	// directory every user may read.
	n.scripts = filepath.Join(n.dir, "slurm")
	bindir := filepath.Join(n.dir, "bin")
	for _, d := range []string{n.scripts, bindir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"gpusched-slurm", "prolog.sh", "epilog.sh", "example-job.sh"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.scripts, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []struct{ name, target string }{
		{"gpuschedctl", n.bins.Ctl},
		{"gpusched-simjob", n.bins.SimJob},
		{"gpusched-slurm", filepath.Join(n.scripts, "gpusched-slurm")},
	} {
		if err := os.Symlink(l.target, filepath.Join(bindir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	n.path = bindir + ":/usr/local/bin:/usr/bin:/bin"

	notify := testutil.NewNotify(t, n.dir)
	n.daemon = exec.Command(n.bins.Daemon,
		"--sim", fmt.Sprintf("%dx24G", gpus), "--socket", n.sock, "--group", group,
		"--state-dir", filepath.Join(n.dir, "state"), "--log-dir", filepath.Join(n.dir, "logs"),
		"--sim-dir", filepath.Join(n.dir, "sim"), "--criu", "none", "--cgroup-root", "none",
		"--gpu-poll", "50ms", "--kill-grace", "5s", "--log-format", "console", "--log-level", "warn")
	n.daemon.Args = append(n.daemon.Args, extra...)
	n.daemon.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.Path)
	n.daemon.Stderr = n.stderr
	if err := n.daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.shutdown)
	notify.WaitFor(t, "READY=1", 30*time.Second)
	return n
}

// shutdown kills every managed process still alive, then stops the daemon.
func (n *node) shutdown() {
	if ps, err := n.psErr(); err == nil {
		for _, p := range ps {
			if p.State != api.StateExited {
				n.ctl("kill", p.Name, "--signal", "KILL")
			}
		}
	} else {
		n.t.Logf("cleanup: cannot list processes to kill: %v", err)
	}
	n.daemon.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { n.daemon.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		n.daemon.Process.Kill()
		<-done
	}
	if n.t.Failed() {
		n.t.Logf("daemon stderr:\n%s", n.stderr.String())
	}
}

// result is how a command ended.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// command prepares name with args, as root or as nobody, with the Slurm
// environment env (KEY=VALUE) on top of a minimal one.
func (n *node) command(asNobody bool, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = n.dir
	cmd.Env = append([]string{"PATH=" + n.path, "GPUSCHED_SOCKET=" + n.sock, "LANG=C"}, env...)
	if asNobody {
		uid, _ := strconv.Atoi(n.nobody.Uid)
		gid, _ := strconv.Atoi(n.nobody.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: append([]uint32{}, n.groups...)}}
	}
	return cmd
}

func (n *node) exec(cmd *exec.Cmd) result {
	n.t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("%s: %v", cmd.Path, err)
	}
	return r
}

// script runs one of the installed scripts.
func (n *node) script(asNobody bool, env []string, name string, args ...string) result {
	n.t.Helper()
	return n.exec(n.command(asNobody, env, filepath.Join(n.scripts, name), args...))
}

// ctl runs gpuschedctl as root.
func (n *node) ctl(args ...string) result {
	n.t.Helper()
	return n.exec(n.command(false, nil, n.bins.Ctl, args...))
}

// job is the environment Slurm gives a job's scripts.
func (n *node) job(id int) []string {
	return []string{fmt.Sprintf("SLURM_JOB_ID=%d", id), "SLURM_JOB_USER=" + n.nobody.Username}
}

// mustRun starts a managed process through gpusched-slurm as nobody in
// job id and waits until it runs.
func (n *node) mustRun(id int, name string, cmd ...string) {
	n.t.Helper()
	r := n.script(true, n.job(id), "gpusched-slurm", append([]string{"run", name, "--"}, cmd...)...)
	if r.code != 0 {
		n.t.Fatalf("gpusched-slurm run %s in job %d: %s", name, id, r)
	}
	full := fmt.Sprintf("slurm-%d-%s", id, name)
	n.waitState(full, api.StateRunning)
}

func (n *node) psErr() (map[string]api.Process, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := api.Dial(ctx, n.sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	list, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		return nil, err
	}
	m := map[string]api.Process{}
	for _, p := range list {
		m[p.Name] = p
	}
	return m, nil
}

// ps is every managed process by name, as root sees them.
func (n *node) ps() map[string]api.Process {
	n.t.Helper()
	m, err := n.psErr()
	if err != nil {
		n.t.Fatalf("ps: %v", err)
	}
	return m
}

// waitState waits until name is in state want (and, for a running
// simulated job, until its GPU memory shows).
func (n *node) waitState(name string, want api.State) api.Process {
	n.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, ok := n.ps()[name]
		if ok && p.State == want {
			return p
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: state %q (present %v), want %s", name, p.State, ok, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitVRAM waits until name's tree holds want MiB of simulated GPU memory.
func (n *node) waitVRAM(name string, want uint64) {
	n.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := n.ps()[name]
		if p.VRAMMiB == want {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s holds %d MiB (state %s), want %d", name, p.VRAMMiB, p.State, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// states checks the state of each named process.
func (n *node) states(want map[string]api.State) {
	n.t.Helper()
	ps := n.ps()
	for name, st := range want {
		if p, ok := ps[name]; !ok {
			n.t.Errorf("%s: not listed", name)
		} else if p.State != st {
			n.t.Errorf("%s: state %s (exit %+v), want %s", name, p.State, p.Exit, st)
		}
	}
}

// procState is a process's state letter in /proc/PID/stat (T: stopped).
func procState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		t.Fatalf("pid %d: stat %q", pid, s)
	}
	return s[i+2 : i+3]
}

// onPath says whether the scripts' PATH finds an executable file.
func (n *node) onPath(file string) bool {
	for _, d := range filepath.SplitList(n.path) {
		if fi, err := os.Stat(filepath.Join(d, file)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

func (n *node) simjob(args ...string) []string {
	return append([]string{n.bins.SimJob}, args...)
}

// TestEpilogEndsOnlyTheJobsProcesses: the epilog of job 42 ends every live
// process of job 42's user named slurm-42-* (a frozen one too), and leaves
// alone job 43's, job 420's (whose prefix starts like 42's), an unprefixed
// one, and a slurm-42-* process of another user.
func TestEpilogEndsOnlyTheJobsProcesses(t *testing.T) {
	n := newNode(t, 1)
	n.mustRun(42, "train", n.simjob("--vram", "1000")...)
	n.mustRun(42, "eval", "sleep", "1000")
	n.mustRun(42, "frozen", n.simjob("--vram", "500")...)
	n.mustRun(43, "train", n.simjob("--vram", "1000")...)
	n.mustRun(420, "train", "sleep", "1000")
	if r := n.script(true, n.job(42), "gpusched-slurm", "run", "done", "--", "true"); r.code != 0 {
		t.Fatalf("run done: %s", r)
	}
	n.waitState("slurm-42-done", api.StateExited)
	if r := n.exec(n.command(true, nil, n.bins.Ctl, "run", "plain", "--", "sleep", "1000")); r.code != 0 {
		t.Fatalf("run plain as nobody: %s", r)
	}
	if r := n.ctl("run", "slurm-42-roots", "--dir", "/", "--", "sleep", "1000"); r.code != 0 {
		t.Fatalf("run slurm-42-roots as root: %s", r)
	}
	n.waitState("plain", api.StateRunning)
	n.waitState("slurm-42-roots", api.StateRunning)
	n.waitVRAM("slurm-42-frozen", 500)
	if r := n.ctl("freeze", "slurm-42-frozen"); r.code != 0 {
		t.Fatalf("freeze: %s", r)
	}

	// What the job's own processes look like to the job's user.
	r := n.script(true, n.job(42), "gpusched-slurm", "ps")
	if want := "slurm-42-done exited\nslurm-42-eval running\nslurm-42-frozen frozen\nslurm-42-train running\n"; r.code != 0 || r.stdout != want {
		t.Errorf("gpusched-slurm ps in job 42: %s; want stdout %q", r, want)
	}

	start := time.Now()
	r = n.script(false, append(n.job(42), "GPUSCHED_KILL_GRACE=3s"), "epilog.sh")
	if r.code != 0 {
		t.Fatalf("epilog: %s", r)
	}
	t.Logf("epilog took %v: %s", time.Since(start).Round(time.Millisecond), r.stderr)
	n.states(map[string]api.State{
		"slurm-42-train":  api.StateExited,
		"slurm-42-eval":   api.StateExited,
		"slurm-42-frozen": api.StateExited,
		"slurm-42-done":   api.StateExited,
		"slurm-43-train":  api.StateRunning,
		"slurm-420-train": api.StateRunning,
		"plain":           api.StateRunning,
		"slurm-42-roots":  api.StateRunning,
	})
	ps := n.ps()
	if e := ps["slurm-42-done"].Exit; e == nil || e.Code == nil || *e.Code != 0 {
		t.Errorf("slurm-42-done exited before the epilog with %+v; the epilog changed it", e)
	}
	for _, name := range []string{"slurm-42-train", "slurm-42-eval", "slurm-42-frozen"} {
		if e := ps[name].Exit; e == nil || e.Signal == "" {
			t.Errorf("%s: exit %+v, want ended by a signal", name, e)
		}
	}

	// Again: nothing left to end, still success.
	if r := n.script(false, n.job(42), "epilog.sh"); r.code != 0 {
		t.Errorf("second epilog: %s", r)
	}
	// Without a daemon to ask, or without the job's user, the epilog
	// fails (Slurm then drains the node) and says why.
	bad := n.command(false, n.job(43), filepath.Join(n.scripts, "epilog.sh"))
	bad.Env = append(bad.Env, "GPUSCHED_SOCKET="+filepath.Join(n.dir, "nothing.sock"))
	if r := n.exec(bad); r.code == 0 || !strings.Contains(r.stderr, "gpuschedd") {
		t.Errorf("epilog without a daemon: %s; want a failure that names gpuschedd", r)
	}
	if r := n.script(false, []string{"SLURM_JOB_ID=43"}, "epilog.sh"); r.code == 0 || !strings.Contains(r.stderr, "SLURM_JOB_USER") {
		t.Errorf("epilog without SLURM_JOB_USER: %s", r)
	}
	n.states(map[string]api.State{"slurm-43-train": api.StateRunning})
}

// TestSuspendResume: gpusched-slurm suspend freezes every running process
// of the job (their GPU memory leaves the GPU, the trees stop), resume
// thaws them; other jobs' processes are untouched. Both as the job's user
// and as root naming the job.
func TestSuspendResume(t *testing.T) {
	n := newNode(t, 1)
	n.mustRun(42, "policy", n.simjob("--vram", "2000")...)
	n.mustRun(42, "reward", n.simjob("--vram", "3000")...)
	n.mustRun(43, "other", n.simjob("--vram", "1000")...)
	n.waitVRAM("slurm-42-policy", 2000)
	n.waitVRAM("slurm-42-reward", 3000)
	n.waitVRAM("slurm-43-other", 1000)

	for _, asRoot := range []bool{false, true} {
		var suspend, resume result
		if asRoot {
			suspend = n.script(false, nil, "gpusched-slurm", "--job", "42", "--user", n.nobody.Username, "suspend")
		} else {
			suspend = n.script(true, n.job(42), "gpusched-slurm", "suspend")
		}
		if suspend.code != 0 {
			t.Fatalf("suspend (root %v): %s", asRoot, suspend)
		}
		ps := n.ps()
		for _, name := range []string{"slurm-42-policy", "slurm-42-reward"} {
			p := ps[name]
			if p.State != api.StateFrozen || p.Tier != api.TierHost || p.VRAMMiB != 0 {
				t.Errorf("after suspend (root %v), %s: state %s, tier %s, %d MiB on the GPU; want frozen in host RAM", asRoot, name, p.State, p.Tier, p.VRAMMiB)
			}
			if st := procState(t, p.PID); st != "T" {
				t.Errorf("after suspend, %s (pid %d) is in state %s, want stopped (T)", name, p.PID, st)
			}
		}
		if p := ps["slurm-43-other"]; p.State != api.StateRunning || p.VRAMMiB != 1000 {
			t.Errorf("job 43's process after job 42's suspend: %s with %d MiB", p.State, p.VRAMMiB)
		}
		// Suspending a suspended job changes nothing and succeeds.
		if r := n.script(true, n.job(42), "gpusched-slurm", "suspend"); r.code != 0 {
			t.Errorf("second suspend: %s", r)
		}

		if asRoot {
			resume = n.script(false, nil, "gpusched-slurm", "--job=42", "--user="+n.nobody.Username, "resume", "--timeout", "30s")
		} else {
			resume = n.script(true, n.job(42), "gpusched-slurm", "resume")
		}
		if resume.code != 0 {
			t.Fatalf("resume (root %v): %s", asRoot, resume)
		}
		ps = n.ps()
		for name, mib := range map[string]uint64{"slurm-42-policy": 2000, "slurm-42-reward": 3000} {
			p := ps[name]
			if p.State != api.StateRunning || p.Tier != api.TierGPU {
				t.Errorf("after resume (root %v), %s: state %s, tier %s", asRoot, name, p.State, p.Tier)
			}
			if st := procState(t, p.PID); st == "T" {
				t.Errorf("after resume, %s (pid %d) is still stopped", name, p.PID)
			}
			n.waitVRAM(name, mib)
		}
	}

	// Root must say whose job it is; a non-number is not a job.
	if r := n.script(false, nil, "gpusched-slurm", "--job", "42", "suspend"); r.code != 2 || !strings.Contains(r.stderr, "--user") {
		t.Errorf("suspend as root without a user: %s", r)
	}
	if r := n.script(true, []string{"SLURM_JOB_ID=42x"}, "gpusched-slurm", "suspend"); r.code != 2 {
		t.Errorf("job id 42x: %s", r)
	}
}

// TestRunNamesAndGPUs: run names the process slurm-<job>-NAME, passes the
// job's Slurm GPUs as --gpu unless told otherwise, and refuses bad names.
func TestRunNamesAndGPUs(t *testing.T) {
	n := newNode(t, 2)
	if r := n.script(true, n.job(7), "gpusched-slurm", "name", "train"); r.code != 0 || r.stdout != "slurm-7-train\n" {
		t.Errorf("name train: %s", r)
	}
	gpusOf := func(name string) []int {
		var idx []int
		for _, g := range n.ps()[name].GPUs {
			idx = append(idx, g.Index)
		}
		slices.Sort(idx)
		return idx
	}
	env := append(n.job(7), "SLURM_JOB_GPUS=1")
	for _, c := range []struct {
		name  string
		extra []string
		env   []string
		want  []int
	}{
		{"slurm-gpus", nil, env, []int{1}},
		{"own-gpu", []string{"--gpu", "0"}, env, []int{0}},
		{"own-gpu-eq", []string{"--gpu=0"}, env, []int{0}},
		{"no-mapping", nil, append(env, "GPUSCHED_SLURM_GPUS=none"), []int{0, 1}},
		{"no-slurm-gpus", nil, n.job(7), []int{0, 1}},
	} {
		args := append(append([]string{"run", c.name}, c.extra...), "--", "sleep", "1000")
		if r := n.script(true, c.env, "gpusched-slurm", args...); r.code != 0 {
			t.Errorf("run %s: %s", c.name, r)
			continue
		}
		full := "slurm-7-" + c.name
		n.waitState(full, api.StateRunning)
		if got := gpusOf(full); !slices.Equal(got, c.want) {
			t.Errorf("%s: GPUs %v, want %v", full, got, c.want)
		}
		if p := n.ps()[full]; p.User != n.nobody.Username {
			t.Errorf("%s runs as %s, want %s", full, p.User, n.nobody.Username)
		}
	}
	for _, c := range []struct {
		args []string
		env  []string
		code int
	}{
		{[]string{"run", "bad/name", "--", "true"}, n.job(7), 2},
		{[]string{"run", strings.Repeat("x", 60), "--", "true"}, n.job(7), 2},
		{[]string{"run", "x", "--", "true"}, append(n.job(7), "SLURM_JOB_GPUS=0-1"), 1},
		{[]string{"run", "x", "--", "true"}, nil, 2}, // not in a job
		{[]string{"frobnicate"}, n.job(7), 2},
		{[]string{"kill", "--grace"}, n.job(7), 2},
	} {
		if r := n.script(true, c.env, "gpusched-slurm", c.args...); r.code != c.code || r.stderr == "" {
			t.Errorf("gpusched-slurm %q: %s; want exit %d with a message", c.args, r, c.code)
		}
	}
	// The JSON readers agree (jq when installed, python3 otherwise).
	var outs []string
	for _, parser := range []string{"jq", "python3"} {
		if !n.onPath(parser) {
			t.Logf("%s not installed: not compared", parser)
			continue
		}
		r := n.script(true, append(n.job(7), "GPUSCHED_SLURM_JSON="+parser), "gpusched-slurm", "ps")
		if r.code != 0 || strings.Count(r.stdout, "\n") != 5 {
			t.Errorf("ps with %s: %s", parser, r)
		}
		outs = append(outs, r.stdout)
	}
	if len(outs) == 2 && outs[0] != outs[1] {
		t.Errorf("jq and python3 disagree:\n%s\n%s", outs[0], outs[1])
	}
}

// TestProlog: the prolog succeeds when the daemon answers, ends what an
// earlier run of the same job id left alive (and nothing else), and fails
// with a reason when the daemon does not answer.
func TestProlog(t *testing.T) {
	n := newNode(t, 1)
	n.mustRun(45, "left", "sleep", "1000")
	n.mustRun(46, "other", "sleep", "1000")
	r := n.script(false, n.job(45), "prolog.sh")
	if r.code != 0 {
		t.Fatalf("prolog: %s", r)
	}
	if !strings.Contains(r.stderr, "slurm-45-left") {
		t.Errorf("prolog did not report the leftover it ended: %s", r)
	}
	n.states(map[string]api.State{"slurm-45-left": api.StateExited, "slurm-46-other": api.StateRunning})
	if r := n.script(false, n.job(47), "prolog.sh"); r.code != 0 || strings.Contains(r.stderr, "leftover") {
		t.Errorf("prolog of a fresh job: %s", r)
	}
	bad := n.command(false, n.job(47), filepath.Join(n.scripts, "prolog.sh"))
	bad.Env = append(bad.Env, "GPUSCHED_SOCKET="+filepath.Join(n.dir, "nothing.sock"))
	if r := n.exec(bad); r.code == 0 || !strings.Contains(r.stderr, "does not answer") {
		t.Errorf("prolog without a daemon: %s; want a failure saying the daemon does not answer", r)
	}
}

// TestBatchScriptFollowsSuspend runs example-job.sh as job 50 and does to
// it what slurmstepd does to suspend and resume a job: SIGTSTP to the
// job's processes, SIGSTOP after the 2 s suspend grace, later SIGCONT. The
// script's traps freeze and thaw its managed processes, which the signals
// themselves never reach; the job then ends with its processes' status.
// The simulated checkpoint takes 3 s per GiB, so the freezes (4.5 and 7.5 s)
// are still in flight when SIGSTOP stops the script and its freeze
// clients: the daemon completes them anyway.
func TestBatchScriptFollowsSuspend(t *testing.T) {
	n := newNode(t, 1, "--sim-checkpoint-per-gib", "3s")
	env := append(n.job(50),
		"POLICY_CMD="+strings.Join(n.simjob("--vram", "1536", "--hold", "18"), " "), "POLICY_VRAM=2G",
		"REWARD_CMD="+strings.Join(n.simjob("--vram", "2560", "--hold", "18"), " "), "REWARD_VRAM=3G")
	cmd := n.command(true, env, filepath.Join(n.scripts, "example-job.sh"))
	cmd.SysProcAttr.Setpgid = true
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("batch script output:\n%s", out.String())
		}
	})
	pg := -cmd.Process.Pid
	n.waitState("slurm-50-policy", api.StateRunning)
	n.waitState("slurm-50-reward", api.StateRunning)
	n.waitVRAM("slurm-50-policy", 1536)
	n.waitVRAM("slurm-50-reward", 2560)

	// Suspend, as slurmstepd does it.
	if err := syscall.Kill(pg, syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := syscall.Kill(pg, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for name, p := range n.ps() {
		if strings.HasPrefix(name, "slurm-50-") && p.State == api.StateFrozen {
			t.Errorf("%s is frozen 2 s after SIGTSTP: the freeze was meant to be still in flight at SIGSTOP", name)
		}
	}
	for _, name := range []string{"slurm-50-policy", "slurm-50-reward"} {
		p := n.waitState(name, api.StateFrozen)
		n.waitVRAM(name, 0)
		if st := procState(t, p.PID); st != "T" {
			t.Errorf("%s (pid %d): state %s, want stopped", name, p.PID, st)
		}
	}
	if st := procState(t, cmd.Process.Pid); st != "T" {
		t.Errorf("the batch script is in state %s, want stopped by SIGSTOP", st)
	}

	// Resume.
	if err := syscall.Kill(pg, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for name, mib := range map[string]uint64{"slurm-50-policy": 1536, "slurm-50-reward": 2560} {
		n.waitState(name, api.StateRunning)
		n.waitVRAM(name, mib)
	}

	// Both processes exit 0 after their --hold; so does the job, whose
	// wait the traps interrupted twice.
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("batch script: %v\n%s", err, out.String())
		}
		exited <- err // for the cleanup
	case <-time.After(90 * time.Second):
		t.Fatalf("batch script still running 90 s later:\n%s", out.String())
	}
	n.states(map[string]api.State{"slurm-50-policy": api.StateExited, "slurm-50-reward": api.StateExited})
	for _, name := range []string{"slurm-50-policy", "slurm-50-reward"} {
		if e := n.ps()[name].Exit; e == nil || e.Code == nil || *e.Code != 0 {
			t.Errorf("%s: exit %+v, want 0", name, e)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var _ io.Writer = (*lockedBuffer)(nil)

// TestSubmitQueuedJobs: gpusched-slurm submit queues work under the job's
// prefix that starts once its memory is free; wait waits for it through
// its start and exit; the epilog cancels the job's queued work, so that
// none of it starts after the job, and ends its running processes.
func TestSubmitQueuedJobs(t *testing.T) {
	n := newNode(t, 1)
	n.mustRun(60, "big", n.simjob("--vram", "20000")...)
	n.waitVRAM("slurm-60-big", 20000)
	for _, c := range []struct {
		job  int
		name string
	}{{60, "queued"}, {61, "later"}} {
		r := n.script(true, n.job(c.job), "gpusched-slurm", "submit", c.name, "--vram", "20G", "--",
			n.bins.SimJob, "--vram", "20000", "--hold", "0.5")
		if r.code != 0 || !strings.Contains(r.stdout, "queued") {
			t.Fatalf("submit %s in job %d: %s", c.name, c.job, r)
		}
	}
	// Job 61's wait lasts until its queued work has started and exited 0.
	waitCmd := n.command(true, n.job(61), filepath.Join(n.scripts, "gpusched-slurm"), "wait")
	var waitOut lockedBuffer
	waitCmd.Stdout, waitCmd.Stderr = &waitOut, &waitOut
	if err := waitCmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- waitCmd.Wait() }()

	r := n.script(false, n.job(60), "epilog.sh")
	if r.code != 0 {
		t.Fatalf("epilog of job 60: %s", r)
	}
	if _, ok := n.ps()["slurm-60-queued"]; ok {
		t.Errorf("slurm-60-queued started: the epilog let job 60's queued work run")
	}
	n.states(map[string]api.State{"slurm-60-big": api.StateExited})
	if r := n.ctl("--json", "jobs", "--all"); !strings.Contains(r.stdout, `"name":"slurm-60-queued","state":"cancelled"`) {
		t.Errorf("slurm-60-queued is not cancelled: %s", r.stdout)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("gpusched-slurm wait in job 61: %v\n%s", err, waitOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gpusched-slurm wait in job 61 still waiting 30 s later\n%s", waitOut.String())
	}
	p := n.ps()["slurm-61-later"]
	if p.State != api.StateExited || p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
		t.Errorf("slurm-61-later: %s, exit %+v; want exited 0 before wait returned", p.State, p.Exit)
	}
}
