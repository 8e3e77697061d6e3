// Package slurmtest runs a real single-node Slurm cluster for tests: Debian's
// Slurm 22.05 (slurmctld, slurmd, the client commands) and MUNGE, installed
// when missing, configured in a temporary directory with their own ports,
// state, logs and MUNGE key and socket, and run in the foreground under the
// test's control. Needs root.
package slurmtest

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/freeport"
)

// Packages are the Debian packages the cluster needs.
var Packages = []string{"slurmctld", "slurmd", "slurm-client", "munge"}

// Config is what a test asks of its cluster.
type Config struct {
	// GPUs is the node's gres/gpu count: one device-like file each,
	// since slurmd 22.05 wants a File= for every GPU without NVML.
	GPUs int
	// Prolog and Epilog are slurm.conf's Prolog= and Epilog= (none when
	// empty).
	Prolog, Epilog string
	// TaskPlugin is slurm.conf's TaskPlugin= (task/none when empty):
	// task/affinity binds each step to the CPUs Slurm gave it.
	TaskPlugin string
	// Lines are appended to slurm.conf: scheduling, preemption and the
	// partitions (PartitionName=... Nodes=NODE; NODE is replaced by the
	// node's name).
	Lines []string
}

// Cluster is a running slurmctld, slurmd and munged.
type Cluster struct {
	t    testing.TB
	Dir  string
	Conf string // SLURM_CONF
	Node string // the node's name: this host's short name
	Log  string // slurmctld's and slurmd's log directory

	mu    *sync.Mutex // guards the daemons' output
	procs []*daemon
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// Install installs the Debian packages that are missing (as
// scripts/test-deps.sh does for make test).
func Install(t testing.TB) {
	t.Helper()
	var missing []string
	for _, p := range []struct{ pkg, file string }{
		{"slurmctld", "/usr/sbin/slurmctld"}, {"slurmd", "/usr/sbin/slurmd"},
		{"slurm-client", "/usr/bin/sbatch"}, {"munge", "/usr/sbin/munged"},
	} {
		if _, err := os.Stat(p.file); err != nil {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skipf("needs the Debian packages %s (no apt-get to install them)", strings.Join(missing, " "))
	}
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "-q"}, missing...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err != nil {
		if out, err := exec.Command("apt-get", "update", "-q").CombinedOutput(); err != nil {
			t.Fatalf("apt-get update: %v: %s", err, out)
		}
		if out, err := install(); err != nil {
			t.Fatalf("apt-get install %s: %v: %s", strings.Join(missing, " "), err, out)
		}
	}
}

// Start installs Slurm if needed, writes the configuration and starts
// munged, slurmctld and slurmd, and returns once the node is idle. The
// cluster is stopped, and its directory removed, when t ends; Check is
// run first.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (runs slurmctld, slurmd and munged)")
	}
	Install(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: MUNGE's socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "gsslurm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, mu: &sync.Mutex{}, Dir: dir, Node: strings.SplitN(host, ".", 2)[0]}
	c.Conf = filepath.Join(c.Dir, "slurm.conf")
	c.Log = filepath.Join(c.Dir, "log")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"state", 0o700}, {"spool", 0o755}, {"log", 0o755}, {"run", 0o755}, {"munge", 0o700}, {"munge-sock", 0o755}, {"dev", 0o755}} {
		if err := os.Mkdir(filepath.Join(c.Dir, d.path), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(c.Dir, "munge", "key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	var gres []string
	for i := range cfg.GPUs {
		// Character devices with /dev/null's numbers: slurmd 22.05
		// rejects a File= that is no device ("is not a valid character
		// or block device, fix your gres.conf").
		f := filepath.Join(c.Dir, "dev", fmt.Sprintf("nvidia%d", i))
		if err := syscall.Mknod(f, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatalf("mknod %s: %v", f, err)
		}
		gres = append(gres, "Name=gpu File="+f)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "gres.conf"), []byte(strings.Join(gres, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Conf, []byte(c.conf(cfg)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)

	sock := filepath.Join(c.Dir, "munge-sock", "munge.socket")
	c.start("munged", "/usr/sbin/munged", "-F", "--force", "-S", sock,
		"--key-file", filepath.Join(c.Dir, "munge", "key"), "--pid-file", filepath.Join(c.Dir, "run", "munged.pid"),
		"--seed-file", filepath.Join(c.Dir, "munge", "seed"), "--log-file", filepath.Join(c.Log, "munged.log"))
	c.waitFor("munged's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	c.start("slurmctld", "/usr/sbin/slurmctld", "-D", "-i", "-f", c.Conf)
	c.start("slurmd", "/usr/sbin/slurmd", "-D", "-f", c.Conf)
	c.waitFor("node "+c.Node+" idle", func() bool {
		out, err := c.Command("sinfo", "-h", "-n", c.Node, "-o", "%T").Output()
		return err == nil && strings.TrimSpace(string(out)) == "idle"
	})
	return c
}

// conf is the cluster's slurm.conf.
func (c *Cluster) conf(cfg Config) string {
	d := func(p string) string { return filepath.Join(c.Dir, p) }
	lines := []string{
		"ClusterName=gpuschedtest",
		fmt.Sprintf("SlurmctldHost=%s(127.0.0.1)", c.Node),
		fmt.Sprintf("SlurmctldPort=%d", c.freePort()),
		fmt.Sprintf("SlurmdPort=%d", c.freePort()),
		"SlurmUser=root",
		"SlurmdUser=root",
		"AuthType=auth/munge",
		"CredType=cred/munge",
		"AuthInfo=socket=" + d("munge-sock/munge.socket"),
		"StateSaveLocation=" + d("state"),
		"SlurmdSpoolDir=" + d("spool"),
		"SlurmctldPidFile=" + d("run/slurmctld.pid"),
		"SlurmdPidFile=" + d("run/slurmd.pid"),
		"SlurmctldLogFile=" + d("log/slurmctld.log"),
		"SlurmdLogFile=" + d("log/slurmd.log"),
		"SlurmctldDebug=info",
		"SlurmdDebug=info",
		"MailProg=/bin/true",
		"MpiDefault=none",
		"ProctrackType=proctrack/linuxproc",
		"TaskPlugin=" + cmp.Or(cfg.TaskPlugin, "task/none"),
		"JobAcctGatherType=jobacct_gather/none",
		"AccountingStorageType=accounting_storage/none",
		"JobCompType=jobcomp/none",
		"ReturnToService=2",
		"SchedulerType=sched/backfill",
		"SelectType=select/cons_tres",
		"SelectTypeParameters=CR_Core",
		"GresTypes=gpu",
	}
	if cfg.Prolog != "" {
		lines = append(lines, "Prolog="+cfg.Prolog)
	}
	if cfg.Epilog != "" {
		lines = append(lines, "Epilog="+cfg.Epilog)
	}
	node := fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN", c.Node)
	if cfg.GPUs > 0 {
		node += fmt.Sprintf(" Gres=gpu:%d", cfg.GPUs)
	}
	lines = append(lines, node)
	for _, l := range cfg.Lines {
		lines = append(lines, strings.ReplaceAll(l, "NODE", c.Node))
	}
	return strings.Join(lines, "\n") + "\n"
}

// freePort is a port for one of the cluster's daemons (freeport.Pick).
func (c *Cluster) freePort() int {
	port, err := freeport.Pick()
	if err != nil {
		c.t.Fatal(err)
	}
	return port
}

func (c *Cluster) start(name, path string, args ...string) {
	c.t.Helper()
	d := &daemon{name: name, cmd: exec.Command(path, args...), out: &bytes.Buffer{}, done: make(chan struct{})}
	d.cmd.Env = c.Env()
	d.cmd.Stdout, d.cmd.Stderr = &syncWriter{mu: c.mu, w: d.out}, &syncWriter{mu: c.mu, w: d.out}
	if err := d.cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	c.procs = append(c.procs, d)
}

// waitFor polls cond (Slurm's own state; it has no event to wait on)
// until it holds, failing after 30 s or when a daemon exits.
func (c *Cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		for _, d := range c.procs {
			select {
			case <-d.done:
				c.t.Fatalf("waiting for %s: %s exited: %v\n%s", what, d.name, d.cmd.ProcessState, c.output(d))
			default:
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not after 30 s\n%s", what, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitFor polls cond, a condition on Slurm's state, until it holds; it
// fails the test after timeout.
func (c *Cluster) WaitFor(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) output(d *daemon) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return d.out.String()
}

// For is c for the subtest t: its failures are t's.
func (c *Cluster) For(t testing.TB) *Cluster {
	d := *c
	d.t = t
	return &d
}

// Env is the environment of the cluster's commands: this process's, with
// SLURM_CONF naming the cluster's configuration.
func (c *Cluster) Env() []string {
	return append(os.Environ(), "SLURM_CONF="+c.Conf)
}

// Command prepares a Slurm client command (sbatch, squeue, scontrol, ...)
// as root.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	return cmd
}

// Run runs a Slurm client command as root and returns its output; it
// fails the test on an error.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	out, err := c.Command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Sbatch runs sbatch with args as the user cred, in dir, with env on top of
// the cluster's environment, and returns the job id.
func (c *Cluster) Sbatch(cred *syscall.Credential, dir string, env []string, args ...string) int {
	c.t.Helper()
	cmd := c.Command("sbatch", append([]string{"--parsable", "-D", dir}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("sbatch %s as uid %d: %v: %s", strings.Join(args, " "), cred.Uid, err, out)
	}
	id, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(out), ";", 2)[0]))
	if err != nil {
		c.t.Fatalf("sbatch printed %q", out)
	}
	return id
}

// JobState is the job's state as scontrol shows it (PENDING, RUNNING,
// SUSPENDED, COMPLETED, CANCELLED, ...).
func (c *Cluster) JobState(id int) string {
	c.t.Helper()
	out := c.Run("scontrol", "-o", "show", "job", strconv.Itoa(id))
	for _, f := range strings.Fields(out) {
		if s, ok := strings.CutPrefix(f, "JobState="); ok {
			return s
		}
	}
	c.t.Fatalf("scontrol show job %d: no JobState in %q", id, out)
	return ""
}

// WaitJobState waits until job id is in one of the states want.
func (c *Cluster) WaitJobState(id int, timeout time.Duration, want ...string) string {
	c.t.Helper()
	var st string
	deadline := time.Now().Add(timeout)
	for {
		st = c.JobState(id)
		for _, w := range want {
			if st == w {
				return st
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("job %d: state %s after %v, want %v\n%s", id, st, timeout, want, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Check fails the test if the node is drained or down, or the logs show a
// failed prolog or epilog, or a daemon exited.
func (c *Cluster) Check() {
	c.t.Helper()
	for _, d := range c.procs {
		select {
		case <-d.done:
			c.t.Errorf("%s exited: %v\n%s", d.name, d.cmd.ProcessState, c.output(d))
		default:
		}
	}
	out, err := c.Command("scontrol", "-o", "show", "node", c.Node).CombinedOutput()
	if err != nil {
		c.t.Errorf("scontrol show node: %v: %s", err, out)
	} else if s := string(out); strings.Contains(s, "DRAIN") || strings.Contains(s, "DOWN") || strings.Contains(s, "FAIL") {
		c.t.Errorf("node %s is not healthy: %s", c.Node, s)
	}
	for _, f := range []string{"slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Log, f))
		for _, l := range strings.Split(string(data), "\n") {
			low := strings.ToLower(l)
			if (strings.Contains(low, "prolog") || strings.Contains(low, "epilog")) &&
				(strings.Contains(low, "fail") || strings.Contains(low, "error")) {
				c.t.Errorf("%s: %s", f, l)
			}
		}
	}
}

// Logs are slurmctld's and slurmd's logs, for a failure message.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Log, f))
		fmt.Fprintf(&b, "--- %s\n%s", f, data)
	}
	return b.String()
}

// stop cancels every job, waits for the queue to empty, then ends the
// daemons (slurmd, slurmctld, munged) and waits for them.
func (c *Cluster) stop() {
	if len(c.procs) == 3 {
		out, _ := c.Command("squeue", "-h", "-o", "%i").Output()
		for _, id := range strings.Fields(string(out)) {
			c.Command("scancel", id).Run()
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, err := c.Command("squeue", "-h", "-o", "%i").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Check()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		d := c.procs[i]
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	if c.t.Failed() {
		c.t.Logf("Slurm logs:\n%s", c.Logs())
	}
}

// syncWriter serialises a daemon's stdout and stderr writes with reads.
type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
