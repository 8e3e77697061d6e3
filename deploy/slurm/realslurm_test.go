package slurm_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/slurmtest"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// slurmConf are the slurm.conf lines of deploy/slurm/README.md ("Time-slicing
// a GPU"), exactly: a partition where Slurm tracks the GPU as gres/gpu and
// never shares it, and a gang-scheduled one where it does not track it and
// gpuschedd freezes the suspended job's GPU memory.
var slurmConf = []string{
	"PreemptType=preempt/partition_prio",
	"PreemptMode=SUSPEND,GANG",
	"SchedulerTimeSlice=5",
	"PartitionName=gpu Nodes=NODE Default=YES OverSubscribe=NO",
	"PartitionName=sliced Nodes=NODE OverSubscribe=FORCE:2",
	"PartitionName=urgent Nodes=NODE OverSubscribe=FORCE:1 PriorityTier=2",
}

// cluster is a real Slurm cluster beside a real gpuschedd on one simulated
// 24 GiB GPU, the job's user a real unprivileged user made for the test.
type cluster struct {
	*node
	s    *slurmtest.Cluster
	u    testutil.User
	jobs string // the batch scripts' directory, the user's
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	testutil.RequiresRoot(t)
	u := testutil.NewUser(t, "gsslurmjob", "gsslurmtest")
	pu, err := user.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	n := newNodeFor(t, pu, u.Groups(), u.Group, 1)
	// slurmd runs the Prolog and Epilog with an environment of its own:
	// these wrappers name the test's daemon and commands, as a site with
	// a socket elsewhere than /run/gpusched would.
	for _, s := range []string{"prolog", "epilog"} {
		w := fmt.Sprintf("#!/bin/sh\nexport GPUSCHED_SOCKET=%s GPUSCHEDCTL=%s\nexec %s \"$@\"\n",
			n.sock, n.bins.Ctl, filepath.Join(n.scripts, s+".sh"))
		if err := os.WriteFile(filepath.Join(n.dir, s), []byte(w), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{node: n, u: u, jobs: filepath.Join(n.dir, "jobs")}
	if err := os.Mkdir(c.jobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(c.jobs, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	c.s = slurmtest.Start(t, slurmtest.Config{
		GPUs: 1, Prolog: filepath.Join(n.dir, "prolog"), Epilog: filepath.Join(n.dir, "epilog"), Lines: slurmConf,
		TaskPlugin: "task/affinity",
	})
	return c
}

// in is c for the subtest t.
func (c *cluster) in(t *testing.T) *cluster {
	n := *c.node
	n.t = t
	return &cluster{node: &n, s: c.s.For(t), u: c.u, jobs: c.jobs}
}

// sbatch submits a job as the test's user with the scripts' environment
// plus env; the job's output goes to jobs/ID.out.
func (c *cluster) sbatch(env []string, args ...string) int {
	c.t.Helper()
	base := []string{"PATH=" + c.path, "GPUSCHED_SOCKET=" + c.sock, "LANG=C"}
	cred := &syscall.Credential{Uid: c.u.UID, Gid: c.u.GID, Groups: c.u.Groups()}
	return c.s.Sbatch(cred, c.jobs, append(base, env...), append([]string{"-o", filepath.Join(c.jobs, "%j.out")}, args...)...)
}

func (c *cluster) jobOutput(id int) string {
	data, _ := os.ReadFile(filepath.Join(c.jobs, fmt.Sprintf("%d.out", id)))
	return string(data)
}

// gpuUsed is the simulated GPU 0's used memory as gpuschedctl --json gpus
// shows it.
func (c *cluster) gpuUsed() uint64 {
	c.t.Helper()
	r := c.ctl("--json", "gpus")
	var out struct {
		GPUs []struct {
			Index   int    `json:"index"`
			UsedMiB uint64 `json:"used_mib"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil || len(out.GPUs) != 1 {
		c.t.Fatalf("gpuschedctl --json gpus: %s (%v)", r, err)
	}
	return out.GPUs[0].UsedMiB
}

// TestRealSlurm runs deploy/slurm under a real slurmctld and slurmd: jobs
// submitted with sbatch run their GPU work through gpusched-slurm,
// scancel and the epilog end it, the prolog cleans a requeued job's
// leftovers, scontrol suspend/resume freeze and thaw it, and two jobs that
// each need the whole GPU time-slice it under Slurm's gang scheduler.
func TestRealSlurm(t *testing.T) {
	c := newCluster(t)
	t.Run("RunAndCancel", c.runAndCancel)
	t.Run("StepCPUs", c.stepCPUs)
	t.Run("RequeueProlog", c.requeueProlog)
	t.Run("SuspendResume", c.suspendResume)
	t.Run("GRESNotShared", c.gresNotShared)
	t.Run("GangTimeSlice", c.gangTimeSlice)
	t.Run("PreemptSuspend", c.preemptSuspend)
	c.s.Check()
}

// runAndCancel: a job's process shows in gpuschedctl ps under the job's
// name, as the job's user, on the job's Slurm GPU; scancel ends the job and
// the epilog its process.
func (c *cluster) runAndCancel(t *testing.T) {
	c = c.in(t)
	script := "#!/bin/bash\nset -e\ngpusched-slurm run train -- gpusched-simjob --vram 3000\ngpusched-slurm wait\n"
	id := c.sbatch(nil, "-p", "gpu", "--gres=gpu:1", "--wrap", script)
	name := fmt.Sprintf("slurm-%d-train", id)
	c.s.WaitJobState(id, 30*time.Second, "RUNNING")
	p := c.waitState(name, api.StateRunning)
	c.waitVRAM(name, 3000)
	if p.User != c.u.Name || len(p.GPUs) != 1 || p.GPUs[0].Index != 0 {
		t.Errorf("%s: user %s, GPUs %+v; want %s on GPU 0", name, p.User, p.GPUs, c.u.Name)
	}
	if r := c.ctl("ps"); !strings.Contains(r.stdout, name) {
		t.Errorf("gpuschedctl ps does not show %s:\n%s", name, r.stdout)
	}
	c.s.Run("scancel", strconv.Itoa(id))
	c.s.WaitJobState(id, 30*time.Second, "CANCELLED")
	p = c.waitState(name, api.StateExited)
	if p.Exit == nil || p.Exit.Signal == "" {
		t.Errorf("%s: exit %+v, want ended by the epilog's signal", name, p.Exit)
	}
	if used := c.gpuUsed(); used != 0 {
		t.Errorf("GPU 0 uses %d MiB after the job's end", used)
	}
}

// stepCPUs: a job's process runs on the CPUs Slurm bound the job's batch
// step to (task/affinity, one CPU of the node's two), those of the
// process that asked for it; without that it ran on every CPU of the
// node, outside the job's allocation.
func (c *cluster) stepCPUs(t *testing.T) {
	c = c.in(t)
	script := "#!/bin/bash\nset -e\ngrep Cpus_allowed_list /proc/self/status\ngpusched-slurm run pinned -- sleep 1000\ngpusched-slurm wait\n"
	id := c.sbatch(nil, "-p", "gpu", "-c", "1", "--wrap", script)
	name := fmt.Sprintf("slurm-%d-pinned", id)
	c.s.WaitJobState(id, 30*time.Second, "RUNNING")
	p := c.waitState(name, api.StateRunning)
	if p.CPUs == "" || strings.ContainsAny(p.CPUs, ",-") {
		t.Errorf("%s: cpus %q, want the job's one CPU (job output: %q)", name, p.CPUs, c.jobOutput(id))
	} else {
		testutil.WantThreadsOn(t, name, p.PID, p.CPUs)
	}
	c.s.Run("scancel", strconv.Itoa(id))
	c.s.WaitJobState(id, 30*time.Second, "CANCELLED")
	c.waitState(name, api.StateExited)
}

// requeueProlog: a requeued job keeps its id; a process of its earlier run
// still alive when it starts again (here one the job's user started under
// the job's prefix after the first run's epilog) is ended by the prolog
// before the new run starts its own.
func (c *cluster) requeueProlog(t *testing.T) {
	c = c.in(t)
	script := "#!/bin/bash\nset -e\ngpusched-slurm run train -- gpusched-simjob --vram 2000\ngpusched-slurm wait\n"
	id := c.sbatch(nil, "-p", "gpu", "--gres=gpu:1", "--requeue", "--wrap", script)
	name := fmt.Sprintf("slurm-%d-train", id)
	left := fmt.Sprintf("slurm-%d-left", id)
	c.s.WaitJobState(id, 30*time.Second, "RUNNING")
	first := c.waitState(name, api.StateRunning)
	c.s.Run("scontrol", "requeuehold", strconv.Itoa(id))
	c.s.WaitJobState(id, 30*time.Second, "PENDING")
	c.waitState(name, api.StateExited) // the epilog of the first run
	if r := c.exec(c.command(true, nil, c.bins.Ctl, "run", left, "--", "sleep", "1000")); r.code != 0 {
		t.Fatalf("run %s as %s: %s", left, c.u.Name, r)
	}
	c.waitState(left, api.StateRunning)
	// A requeued job is eligible only some time after its requeue
	// (slurmctld sets its begin time ahead): start it now.
	c.s.Run("scontrol", "release", strconv.Itoa(id))
	c.s.Run("scontrol", "update", "JobId="+strconv.Itoa(id), "StartTime=now")
	c.s.WaitJobState(id, 60*time.Second, "RUNNING")
	p := c.waitState(left, api.StateExited)
	if p.Exit == nil || p.Exit.Signal == "" {
		t.Errorf("%s: exit %+v, want ended by the prolog", left, p.Exit)
	}
	second := c.waitState(name, api.StateRunning)
	if second.ID == first.ID {
		t.Errorf("%s is still the first run's process", name)
	}
	c.s.Run("scancel", strconv.Itoa(id))
	c.s.WaitJobState(id, 30*time.Second, "CANCELLED")
	c.waitState(name, api.StateExited)
}

// suspendResume: scontrol suspend reaches example-job.sh's traps, which
// freeze the job's processes: the GPU's memory is free while the job is
// suspended, and back after scontrol resume; the processes' host memory
// is intact (simjob checks its pattern every second and would exit 3),
// and the job completes.
func (c *cluster) suspendResume(t *testing.T) {
	c = c.in(t)
	env := []string{
		"POLICY_CMD=" + strings.Join(c.simjob("--vram", "8000", "--host-mem", "64", "--tick", "0.1", "--ticks", "60"), " "), "POLICY_VRAM=8G",
		"REWARD_CMD=" + strings.Join(c.simjob("--vram", "4000", "--host-mem", "64", "--tick", "0.1", "--ticks", "60"), " "), "REWARD_VRAM=4G",
	}
	id := c.sbatch(env, "-p", "gpu", "--gres=gpu:1", filepath.Join(c.scripts, "example-job.sh"))
	names := map[string]uint64{fmt.Sprintf("slurm-%d-policy", id): 8000, fmt.Sprintf("slurm-%d-reward", id): 4000}
	for name, mib := range names {
		c.waitState(name, api.StateRunning)
		c.waitVRAM(name, mib)
	}
	c.s.Run("scontrol", "suspend", strconv.Itoa(id))
	c.s.WaitJobState(id, 10*time.Second, "SUSPENDED")
	for name := range names {
		p := c.waitState(name, api.StateFrozen)
		if p.Tier != api.TierHost {
			t.Errorf("%s: tier %s, want host", name, p.Tier)
		}
	}
	if used := c.gpuUsed(); used != 0 {
		t.Errorf("GPU 0 uses %d MiB while the job is suspended, want 0", used)
	}
	c.s.Run("scontrol", "resume", strconv.Itoa(id))
	for name, mib := range names {
		c.waitState(name, api.StateRunning)
		c.waitVRAM(name, mib)
	}
	if used := c.gpuUsed(); used != 12000 {
		t.Errorf("GPU 0 uses %d MiB after resume, want 12000", used)
	}
	c.s.WaitJobState(id, 60*time.Second, "COMPLETED")
	for name := range names {
		if e := c.ps()[name].Exit; e == nil || e.Code == nil || *e.Code != 0 {
			t.Errorf("%s: exit %+v, want 0 (host memory intact, 60 ticks done)\n%s", name, e, c.jobOutput(id))
		}
	}
}

// preemptSuspend: a job in the urgent partition (a higher PriorityTier)
// suspends a whole-GPU job of the sliced partition: the suspended job's
// memory is frozen, the urgent job's work starts once it is free and
// completes, then the suspended job is resumed, thawed, and completes too.
func (c *cluster) preemptSuspend(t *testing.T) {
	c = c.in(t)
	job := func(ticks int) []string {
		cmd := strings.Join(c.simjob("--vram", "18000", "--tick", "0.1", "--ticks", strconv.Itoa(ticks)), " ")
		return []string{"POLICY_CMD=" + cmd, "POLICY_VRAM=18000M", "REWARD_CMD=" + cmd, "REWARD_VRAM=18000M"}
	}
	// Two processes of 18000 MiB each: they take turns within the job
	// too (submit queues the second until the first exits).
	low := c.sbatch(job(40), "-p", "sliced", "-c", "2", filepath.Join(c.scripts, "example-job.sh"))
	lowPolicy := fmt.Sprintf("slurm-%d-policy", low)
	c.waitState(lowPolicy, api.StateRunning)
	high := c.sbatch(job(20), "-p", "urgent", "-c", "2", filepath.Join(c.scripts, "example-job.sh"))
	c.s.WaitJobState(low, 30*time.Second, "SUSPENDED")
	c.waitState(lowPolicy, api.StateFrozen)
	c.s.WaitJobState(high, 60*time.Second, "COMPLETED")
	c.s.WaitJobState(low, 90*time.Second, "COMPLETED")
	for _, id := range []int{low, high} {
		for _, n := range []string{"policy", "reward"} {
			name := fmt.Sprintf("slurm-%d-%s", id, n)
			if e := c.ps()[name].Exit; e == nil || e.Code == nil || *e.Code != 0 {
				t.Errorf("%s: exit %+v, want 0\n%s", name, e, c.jobOutput(id))
			}
		}
	}
	if out := c.jobOutput(low); !strings.Contains(out, "froze "+lowPolicy) || !strings.Contains(out, "thawed "+lowPolicy) {
		t.Errorf("job %d (preempted): no freeze and thaw of %s in its output:\n%s", low, lowPolicy, out)
	}
}

// gresNotShared: why the time-sliced partition's jobs do not ask for the
// GPU. Even there (OverSubscribe=FORCE:2, PreemptMode=SUSPEND,GANG), Slurm
// gives a gres/gpu to one job at a time: the second waits for Resources
// instead of being gang-scheduled.
func (c *cluster) gresNotShared(t *testing.T) {
	c = c.in(t)
	var ids [2]int
	for i := range ids {
		ids[i] = c.sbatch(nil, "-p", "sliced", "-c", "2", "--gres=gpu:1", "--wrap", "sleep 60")
	}
	c.s.WaitJobState(ids[0], 30*time.Second, "RUNNING")
	id := strconv.Itoa(ids[1])
	c.s.WaitFor("the second job pending for Resources", 30*time.Second, func() bool {
		out := c.s.Run("scontrol", "-o", "show", "job", id)
		return strings.Contains(out, "JobState=PENDING") && strings.Contains(out, "Reason=Resources")
	})
	c.s.Run("scancel", strconv.Itoa(ids[0]), id)
	for _, id := range ids {
		c.s.WaitJobState(id, 30*time.Second, "CANCELLED")
	}
}

// gangTimeSlice: two jobs that each need 19000 of the GPU's 24 GiB run in
// the gang-scheduled partition, then the same two one after the other in
// the gpu partition. Sliced, both are suspended and resumed in turn, both
// make progress, neither runs out of memory, and both complete; the
// makespans and the cost per switch are logged.
func (c *cluster) gangTimeSlice(t *testing.T) {
	c = c.in(t)
	const ticks = 150 // 15 s of work per process at 0.1 s a tick: three time slices
	env := []string{
		"POLICY_CMD=" + strings.Join(c.simjob("--vram", "18000", "--tick", "0.1", "--ticks", strconv.Itoa(ticks)), " "), "POLICY_VRAM=18000M",
		"REWARD_CMD=" + strings.Join(c.simjob("--vram", "1000", "--tick", "0.1", "--ticks", strconv.Itoa(ticks)), " "), "REWARD_VRAM=1000M",
	}
	run := func(args ...string) (time.Duration, [2]int, [2]int) {
		start := time.Now()
		var ids [2]int
		for i := range ids {
			ids[i] = c.sbatch(env, append(args, "-c", "2", filepath.Join(c.scripts, "example-job.sh"))...)
			if i == 0 {
				// The second job comes once the first one's big process
				// holds the GPU, so that the first is suspended while it
				// runs (it needs two time slices) and its process is
				// frozen for the second's, whatever the machine's load.
				c.waitState(fmt.Sprintf("slurm-%d-policy", ids[0]), api.StateRunning)
			}
		}
		var suspended [2]int
		seen := [2]string{}
		c.s.WaitFor("both jobs done", 120*time.Second, func() bool {
			done := 0
			for i, id := range ids {
				st := c.s.JobState(id)
				if st == "SUSPENDED" && seen[i] != st {
					suspended[i]++
				}
				seen[i] = st
				switch st {
				case "COMPLETED":
					done++
				case "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY":
					t.Fatalf("job %d: %s\n%s", id, st, c.jobOutput(id))
				}
			}
			return done == 2
		})
		return time.Since(start), ids, suspended
	}
	sliced, ids, suspended := run("-p", "sliced")
	for i, id := range ids {
		for _, n := range []string{"policy", "reward"} {
			name := fmt.Sprintf("slurm-%d-%s", id, n)
			p := c.ps()[name]
			if e := p.Exit; e == nil || e.Code == nil || *e.Code != 0 {
				t.Errorf("%s: exit %+v, want 0\n%s", name, e, c.jobOutput(id))
			}
			if log := c.ctl("logs", name).stdout; strings.Contains(log, "out of memory") || !strings.Contains(log, fmt.Sprintf("tick %d", ticks)) {
				t.Errorf("%s: log without its %d ticks, or with an out-of-memory:\n%s", name, ticks, log)
			}
		}
		if suspended[i] == 0 {
			t.Errorf("job %d was never suspended: Slurm did not time-slice\n%s", id, c.jobOutput(id))
		}
	}
	// The first job's traps froze its big process on suspend and thawed it
	// on resume: the GPU went to the second job meanwhile. (The second's
	// may still be queued, not yet started, when its job is suspended.)
	if out, policy := c.jobOutput(ids[0]), fmt.Sprintf("slurm-%d-policy", ids[0]); !strings.Contains(out, "froze "+policy) || !strings.Contains(out, "thawed "+policy) {
		t.Errorf("the first job's 18000 MiB process was not frozen and thawed: the jobs did not alternate on the GPU\n%s", out)
	}
	var freeze, thaw time.Duration
	var freezes, thaws int
	for _, id := range ids {
		out := c.jobOutput(id)
		t.Logf("job %d's output:\n%s", id, out)
		for _, m := range opTime.FindAllStringSubmatch(out, -1) {
			d, err := time.ParseDuration(strings.ReplaceAll(m[3], "µ", "u"))
			if err != nil || !strings.HasSuffix(m[2], "-policy") {
				continue
			}
			if m[1] == "froze" {
				freeze, freezes = freeze+d, freezes+1
			} else {
				thaw, thaws = thaw+d, thaws+1
			}
		}
	}
	serial, _, _ := run("-p", "gpu", "--gres=gpu:1")
	t.Logf("two jobs of %d ticks (0.1 s) each, 18000+1000 MiB of a 24 GiB GPU: gang-scheduled (SchedulerTimeSlice=5) makespan %v with %d suspensions, back to back %v: ratio %.2f; "+
		"a switch froze 17.6 GiB in %v and thawed it in %v on average (%d freezes, %d thaws, sim driver)",
		ticks, sliced.Round(time.Millisecond), suspended[0]+suspended[1], serial.Round(time.Millisecond), sliced.Seconds()/serial.Seconds(),
		(freeze / time.Duration(max(freezes, 1))).Round(time.Millisecond), (thaw / time.Duration(max(thaws, 1))).Round(time.Millisecond), freezes, thaws)
}

// opTime matches gpuschedctl freeze's and thaw's result lines, as
// gpusched-slurm suspend and resume print them into the job's output.
var opTime = regexp.MustCompile(`(?m)^(froze|thawed) (\S+): .* in ([0-9.]+[µmn]?s) \(`)
