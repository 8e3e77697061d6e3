package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/mps/mpstest"
	"github.com/gpusched/gpusched/pkg/api"
)

// fakeMPS puts the fake nvidia-cuda-mps-control first on the PATH the
// daemon will look it up on, and returns the directory where it records
// its calls. Call it before the daemon starts.
func fakeMPS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := mpstest.Install(dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// mpsCalls is what the fake control binary in dir recorded.
func mpsCalls(t *testing.T, dir string) []string {
	t.Helper()
	c, err := mpstest.Calls(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitMPSCalls waits until the fake has recorded n calls of verb.
func waitMPSCalls(t *testing.T, dir, verb string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := mpsCalls(t, dir)
		if mpstest.Count(c, verb) >= n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MPS control binary recorded %q, want %d %q", c, n, verb)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logText is the whole log of name.
func (h *ckptHarness) logText(name string) string {
	h.t.Helper()
	lines, err := h.client().Logs(ctxT(h.t), name, -1)
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// environOf is the environment of a live process, from /proc.
func environOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// niceOfThreads is the nice value (field 19 of /proc/PID/task/TID/stat) of
// every thread of pid.
func niceOfThreads(t *testing.T, pid int) map[string]int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		// Fields after the command, which ends at the last ')', start with
		// field 3 (state).
		rest := string(data[bytes.LastIndexByte(data, ')')+2:])
		fields := strings.Fields(rest)
		n, err := strconv.Atoi(fields[19-3])
		if err != nil {
			t.Fatalf("stat of thread %s: %q", task.Name(), data)
		}
		out[task.Name()] = n
	}
	return out
}

// TestMPSUnavailable: without nvidia-cuda-mps-control, run and submit with
// MPS attributes are refused as unavailable, saying why, and nothing is
// created or started.
func TestMPSUnavailable(t *testing.T) {
	// The PATH without any directory that holds a real control binary.
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, mpstest.Name)); err != nil {
			keep = append(keep, dir)
		}
	}
	t.Setenv("PATH", strings.Join(keep, string(os.PathListSeparator)))
	if path, err := exec.LookPath(mpstest.Name); err == nil {
		t.Fatalf("%s is still on PATH", path)
	}
	h := newQueueHarness(t, "1x16G")
	c := h.client()
	env := map[string]string{"PATH": os.Getenv("PATH")}

	_, err := c.Run(ctxT(t), api.RunParams{Name: "m", Cmd: h.simjob("--vram", "64"), Dir: "/", Env: env, MPSThreads: 50})
	wantCode(t, err, api.CodeUnavailable)
	if want := `run "m": mps_threads needs NVIDIA MPS: nvidia-cuda-mps-control was not found`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("run: %q, want it to start with %q", err, want)
	}
	_, err = c.Run(ctxT(t), api.RunParams{Name: "m", Cmd: h.simjob("--vram", "64"), Dir: "/", Env: env, MPSMemLimit: gib(2)})
	wantCode(t, err, api.CodeUnavailable)
	if !strings.Contains(err.Error(), "mps_mem_limit needs NVIDIA MPS") {
		t.Errorf("run with a memory limit: %q", err)
	}
	_, err = c.Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "j", Cmd: h.simjob("--vram", "64"), Dir: "/", Env: env,
		VRAM: gib(4), MPSThreads: 50}})
	wantCode(t, err, api.CodeUnavailable)
	if !strings.Contains(err.Error(), "mps_threads needs NVIDIA MPS: nvidia-cuda-mps-control was not found") {
		t.Errorf("submit: %q", err)
	}
	// A batch with one MPS job queues nothing.
	_, err = c.Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Dir: "/", Env: env}, Jobs: []api.JobSpec{
		{Name: "plain", Cmd: h.simjob("--vram", "64")},
		{Name: "capped", Cmd: h.simjob("--vram", "64"), MPSMemLimit: gib(1)},
	}})
	wantCode(t, err, api.CodeUnavailable)

	if ps, err := c.PS(ctxT(t), api.PSParams{}); err != nil || len(ps) != 0 {
		t.Errorf("processes after the refusals: %+v, %v", ps, err)
	}
	if jobs, err := c.Jobs(ctxT(t), api.JobsParams{All: true}); err != nil || len(jobs) != 0 {
		t.Errorf("jobs after the refusals: %+v, %v", jobs, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(h.cfg.Socket), "mps")); err == nil {
		t.Error("MPS directories were created")
	}
	// Without MPS attributes all is as usual.
	h.submit(api.JobSpec{Name: "plain", Cmd: h.simjob("--vram", "64", "--hold", "0.01")})
	if j := h.waitJob("plain"); j.State != api.JobDone {
		t.Fatalf("plain job: %s %q", j.State, j.Reason)
	}
}

// TestMPSJob: a job with vram=4G mps_threads=50 runs as an MPS client: the
// control daemon is started once for it, the job gets the MPS variables,
// and its memory limit (its declaration by default) is enforced on the
// simulated GPU: 6 GiB fails with an out-of-memory error, 3 GiB works.
// Once its clients have exited the control daemon is told to quit.
func TestMPSJob(t *testing.T) {
	calls := fakeMPS(t)
	h := newQueueHarness(t, "1x16G")
	pipe := filepath.Join(filepath.Dir(h.cfg.Socket), "mps", "pipe")
	script := `echo "mps env: $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT $CUDA_MPS_PIPE_DIRECTORY $GPUSCHED_PRIORITY"; ` +
		h.bins.SimJob + " --vram 6144; " + h.bins.SimJob + " --vram 3072 --hold 0.1"
	j := h.submit(api.JobSpec{Name: "capped", Cmd: []string{"/bin/sh", "-c", script}, VRAM: gib(4), MPSThreads: 50})
	if j.MPSThreads != 50 || j.MPSMemLimit != 4096 {
		t.Fatalf("submitted: mps threads %d, limit %d MiB; want 50 and the declaration, 4096", j.MPSThreads, j.MPSMemLimit)
	}
	done := h.waitJob("capped")
	if done.State != api.JobDone {
		t.Fatalf("job %s: %q", done.State, done.Reason)
	}
	log := h.logText("capped")
	for _, want := range []string{
		"mps env: 50 0=4096M " + pipe + " normal",
		"simjob: mps threads=50",
		"simjob: mps mem limit 4096 MiB on ",
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6144 MiB.",
		"under this process's MPS memory limit of 4096 MiB",
		"simjob: allocated 3072 MiB on ",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if p := h.proc("capped"); p.MPSThreads != 50 || p.MPSMemLimit != 4096 {
		t.Errorf("process: mps threads %d, limit %d", p.MPSThreads, p.MPSMemLimit)
	}
	c := waitMPSCalls(t, calls, "quit", 1)
	if want := []string{"start " + pipe + " " + filepath.Join(filepath.Dir(pipe), "log"), "quit " + pipe}; strings.Join(c, "|") != strings.Join(want, "|") {
		t.Errorf("control calls %q, want %q", c, want)
	}
	for _, dir := range []string{pipe, filepath.Join(filepath.Dir(pipe), "log")} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v, %v; want a 0755 directory", dir, fi, err)
		}
	}

	// Two clients at once share one control daemon.
	for _, name := range []string{"a", "b"} {
		h.submit(api.JobSpec{Name: name, Cmd: h.simjob("--vram", "512"), VRAM: gib(1), MPSMemLimit: gib(1)})
	}
	h.waitRunning("a", "b")
	if c := mpsCalls(t, calls); mpstest.Count(c, "start") != 2 || mpstest.Count(c, "quit") != 1 {
		t.Fatalf("with two clients: %q", c)
	}
	if _, err := h.client().Cancel(ctxT(t), "a"); err != nil {
		t.Fatal(err)
	}
	h.waitJob("a")
	time.Sleep(100 * time.Millisecond)
	if c := mpsCalls(t, calls); mpstest.Count(c, "quit") != 1 {
		t.Fatalf("quit with a client left: %q", c)
	}
	if _, err := h.client().Cancel(ctxT(t), "b"); err != nil {
		t.Fatal(err)
	}
	h.waitJob("b")
	waitMPSCalls(t, calls, "quit", 2)
	if c := mpsCalls(t, calls); mpstest.Count(c, "fail") != 0 {
		t.Errorf("control calls %q", c)
	}

	// A preemptible job cannot be an MPS client.
	_, err := h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "p", Cmd: h.simjob(), Dir: "/",
		VRAM: gib(1), MPSThreads: 10, Preemptible: true}})
	wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "a preemptible job cannot be an MPS client") {
		t.Errorf("preemptible MPS job: %q", err)
	}
}

// TestMPSClientCannotBeFrozen: freeze, hibernate, swap, migrate and fork
// of an MPS client are refused as unavailable up front; it keeps running.
// After a daemon restart the client is counted again, and its exit stops
// the control daemon.
func TestMPSClientCannotBeFrozen(t *testing.T) {
	calls := fakeMPS(t)
	h := newQueueHarness(t, "2x8G")
	c := h.client()
	env := map[string]string{"PATH": os.Getenv("PATH")}
	if _, err := c.Run(ctxT(t), api.RunParams{Name: "client", Cmd: h.simjob("--vram", "1024"), Dir: "/", Env: env,
		GPU: &api.GPURef{Index: 0}, MPSThreads: 30, MPSMemLimit: gib(2)}); err != nil {
		t.Fatal(err)
	}
	h.followCount("client", "simjob: allocated 1024 MiB", 1)
	h.run("other", h.bins.SimJob, "--vram", "64")
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	const why = `process "client" is an MPS client: CUDA checkpoint does not support MPS clients`
	for op, call := range map[string]func() error{
		"freeze":    func() error { _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "client"}); return err },
		"hibernate": func() error { _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "client"}); return err },
		"swap":      func() error { _, err := c.Swap(ctxT(t), api.SwapParams{Freeze: "client", Thaw: "other"}); return err },
		"migrate": func() error {
			_, err := c.Migrate(ctxT(t), api.MigrateParams{Name: "client", GPU: &api.GPURef{Index: 1}})
			return err
		},
		"fork": func() error { _, err := c.Fork(ctxT(t), api.ForkParams{Name: "client", Copies: 1}); return err },
		"thaw": func() error { _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "client"}); return err },
	} {
		err := call()
		if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v (code %q), want unavailable: %s", op, err, api.CodeOf(err), why)
		}
	}
	p := h.proc("client")
	if p.State != api.StateRunning || p.VRAMMiB != 1024 || p.MPSThreads != 30 || p.MPSMemLimit != 2048 {
		t.Fatalf("after the refusals: %s, %d MiB, mps %d/%d", p.State, p.VRAMMiB, p.MPSThreads, p.MPSMemLimit)
	}
	if st := h.cudaStates("client"); strings.Join(st, ",") != "running" {
		t.Errorf("CUDA states %v, want running", st)
	}
	if o := h.proc("other"); o.State != api.StateFrozen {
		t.Errorf("the swap's other side is %s", o.State)
	}

	// A restart counts the live client again: no new start, and its exit
	// stops the control daemon.
	h.stop()
	h.start()
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "client"}); err != nil {
		t.Fatal(err)
	}
	got := waitMPSCalls(t, calls, "quit", 1)
	if mpstest.Count(got, "start") != 1 || mpstest.Count(got, "fail") != 0 {
		t.Errorf("control calls %q, want one start and one quit", got)
	}
}

// TestJobNice: a job's nice value is on every thread of its process, which
// learns it as GPUSCHED_NICE and GPUSCHED_PRIORITY; a caller other than
// root cannot ask for a nice value below 0.
func TestJobNice(t *testing.T) {
	nobody, group := nobodyUser(t)
	h := newQueueHarness(t, "1x16G", func(c *config.Config) { c.Group = group.Name })
	j := h.submit(api.JobSpec{Name: "low", Cmd: h.simjob("--vram", "64", "--tick", "0.01"), Nice: 5})
	if j.Nice != 5 {
		t.Fatalf("submitted nice %d", j.Nice)
	}
	h.waitRunning("low")
	h.followCount("low", "tick ", 3) // its runtime has started its threads
	p := h.proc("low")
	if p.Nice != 5 || h.job("low").Nice != 5 {
		t.Errorf("process nice %d, job nice %d", p.Nice, h.job("low").Nice)
	}
	nices := niceOfThreads(t, p.PID)
	if len(nices) < 2 {
		t.Errorf("only %d threads: %v", len(nices), nices)
	}
	for tid, n := range nices {
		if n != 5 {
			t.Errorf("thread %s has nice %d, want 5 (all: %v)", tid, n, nices)
		}
	}
	env := environOf(t, p.PID)
	if env["GPUSCHED_PRIORITY"] != "low" || env["GPUSCHED_NICE"] != "5" {
		t.Errorf("GPUSCHED_PRIORITY=%q GPUSCHED_NICE=%q, want low and 5", env["GPUSCHED_PRIORITY"], env["GPUSCHED_NICE"])
	}
	for _, k := range []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"} {
		if v, ok := env[k]; ok {
			t.Errorf("a process that is no MPS client has %s=%q", k, v)
		}
	}

	// Root may raise a priority; run says so too.
	hi, err := h.client().Run(ctxT(t), api.RunParams{Name: "hi", Cmd: h.simjob("--tick", "0.01"), Dir: "/", Nice: -3})
	if err != nil {
		t.Fatal(err)
	}
	h.followCount("hi", "tick ", 1)
	if env := environOf(t, hi.PID); env["GPUSCHED_PRIORITY"] != "high" || env["GPUSCHED_NICE"] != "-3" {
		t.Errorf("run --nice -3: GPUSCHED_PRIORITY=%q GPUSCHED_NICE=%q", env["GPUSCHED_PRIORITY"], env["GPUSCHED_NICE"])
	}
	plain := h.run("plain", h.bins.SimJob, "--tick", "0.01")
	h.followCount("plain", "tick ", 1)
	if env := environOf(t, plain.PID); env["GPUSCHED_PRIORITY"] != "normal" || env["GPUSCHED_NICE"] != "0" {
		t.Errorf("plain run: GPUSCHED_PRIORITY=%q GPUSCHED_NICE=%q", env["GPUSCHED_PRIORITY"], env["GPUSCHED_NICE"])
	}

	// Bad values change nothing.
	_, err = h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "bad", Cmd: h.simjob(), Dir: "/", Nice: 20}})
	wantCode(t, err, api.CodeInvalidArgument)
	if want := `submit "bad": nice 20 is outside -20..19`; err.Error() != want {
		t.Errorf("nice 20: %q, want %q", err, want)
	}
	if _, stderr, code := h.asUser(nobody, "submit", "--name", "mine", "--nice", "-5", "--dir", "/", "--", "true"); code == 0 ||
		!strings.Contains(stderr, string(api.CodePermissionDenied)) || !strings.Contains(stderr, "nice -5 below 0 needs root") {
		t.Fatalf("submit --nice -5 as nobody: exit %d, %q; want permission_denied", code, stderr)
	}
	if _, err := h.client().Job(ctxT(t), "mine"); !api.IsNotFound(err) {
		t.Errorf("the refused job exists: %v", err)
	}
}
