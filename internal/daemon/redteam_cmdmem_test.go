package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Issue 20: the records a user keeps (--max-procs-per-user live and
// --keep-finished exited, 756 by default; --keep-finished finished jobs,
// 500) cost the daemon's memory a few KiB each, whatever their commands:
// each keeps its command cut as listings cut it, and the whole one on
// disk. Before, records of 256 KiB commands held all of it: 200 of them
// took a daemon from 18 to 90 MiB of RSS, and one user's processes and
// finished jobs would have held 314 MiB.

// TestRedTeamLongCommandsKeptOnDisk: a real user runs processes, then
// jobs, of 200 KiB commands; the daemon's live heap grows by little more
// than the cut commands, status, wait and job answer the whole command
// (after a restart too), a listing the cut one, and rm and jobs prune take
// the whole one off the disk.
func TestRedTeamLongCommandsKeptOnDisk(t *testing.T) {
	u := testutil.NewUser(t, "gscmdmem", "gscmd")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	const procs = 48
	cmd := []string{"true", strings.Repeat("a", 100<<10), strings.Repeat("b", 100<<10)}
	names := make([]string, procs)
	before := int64(liveHeap())
	for i := range names {
		names[i] = "long-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, errOut, code := h.ctlAs(u, append([]string{"run", "--dir", "/", names[i], "--"}, cmd...)...); code != 0 {
			t.Fatalf("run %s: %s", names[i], errOut)
		}
	}
	waiter := h.client() // one client: each of the harness's holds a buffer of its own
	for _, name := range names {
		if _, err := waiter.Wait(ctxT(t), api.WaitParams{Name: name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A record with its command cut at 4 KiB, its runtime's and its
	// events' share: far below the 200 KiB of a command kept whole
	// (9.6 MiB for the 48).
	const perProc = 32 << 10
	grown := int64(liveHeap()) - before
	t.Logf("%d records of %d KiB commands: the daemon's live heap grew by %d bytes", procs, 200, grown)
	if grown > procs*perProc {
		t.Errorf("%d records of 200 KiB commands grew the live heap by %d bytes, want at most %d", procs, grown, procs*perProc)
	}

	whole := func(what string) {
		t.Helper()
		p, err := h.client().Process(ctxT(t), names[0])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Cmd, cmd) || p.CmdTruncated {
			t.Errorf("status of one, %s: %d arguments, truncated %v; want the whole command", what, len(p.Cmd), p.CmdTruncated)
		}
	}
	whole("as run")
	jobs := make([]string, procs/2)
	for i := range jobs {
		jobs[i] = "job-" + names[i]
		if _, errOut, code := h.ctlAs(u, append([]string{"submit", "--name", jobs[i], "--dir", "/", "--"}, cmd...)...); code != 0 {
			t.Fatalf("submit %s: %s", jobs[i], errOut)
		}
	}
	for _, name := range jobs {
		if j, err := waiter.WaitJob(ctxT(t), api.JobWaitParams{Name: name}, nil); err != nil || j.State != api.JobDone {
			t.Fatalf("job %s: %v, %v", name, j.State, err)
		}
	}
	// Each finished job and its attempt's record: far below the 400 KiB
	// of a job and a record keeping the command whole (9.6 MiB for 24).
	grown = int64(liveHeap()) - before
	t.Logf("and %d finished jobs of them: the live heap grew by %d bytes", len(jobs), grown)
	if grown > 2*procs*perProc {
		t.Errorf("and %d finished jobs of 200 KiB commands: the live heap grew by %d bytes, want at most %d", len(jobs), grown, 2*procs*perProc)
	}
	if j, err := h.client().Job(ctxT(t), jobs[0]); err != nil || !slices.Equal(j.Cmd, cmd) || j.CmdTruncated {
		t.Errorf("job of one finished job: %d arguments, truncated %v (%v); want the whole command", len(j.Cmd), j.CmdTruncated, err)
	}
	allocated := totalAlloc()
	listed, err := h.client().Jobs(ctxT(t), api.JobsParams{All: true})
	if err != nil {
		t.Fatal(err)
	}
	// Listed from what the records keep: reading the 24 whole commands
	// (4.8 MiB of files) only to cut them again allocated 17 MB.
	allocated = totalAlloc() - allocated
	t.Logf("jobs --all of %d finished jobs allocated %d bytes", len(jobs), allocated)
	if allocated > 2<<20 {
		t.Errorf("jobs --all of %d finished jobs allocated %d bytes, want at most 2 MiB: read their whole commands?", len(jobs), allocated)
	}
	for _, j := range listed {
		if b, _ := json.Marshal(j.Cmd); !j.CmdTruncated || len(b) > api.ListCmdBytes {
			t.Fatalf("jobs lists %s with a command of %d bytes, truncated %v", j.Name, len(b), j.CmdTruncated)
		}
	}
	r := h.rawAsUser(u).call(api.MethodWait, api.WaitParams{Name: names[1]})
	var waited api.Process
	b, _ := json.Marshal(r["result"])
	if err := json.Unmarshal(b, &waited); err != nil || !slices.Equal(waited.Cmd, cmd) {
		t.Errorf("wait of an exited process: %d arguments (%v); want the whole command", len(waited.Cmd), err)
	}
	ps, err := h.client().PS(ctxT(t), api.PSParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if b, _ := json.Marshal(p.Cmd); !p.CmdTruncated || len(b) > proctable.KeptCmdBytes {
			t.Fatalf("ps lists %s with a command of %d bytes, truncated %v", p.Name, len(b), p.CmdTruncated)
		}
	}
	h.stop()
	h.start()
	whole("after a restart")

	if j, err := h.client().Job(ctxT(t), jobs[0]); err != nil || !slices.Equal(j.Cmd, cmd) {
		t.Errorf("job of one finished job after a restart: %d arguments (%v); want the whole command", len(j.Cmd), err)
	}

	procsKept, jobsKept := filepath.Join(h.cfg.StateDir, "procs", "cmds"), filepath.Join(h.cfg.StateDir, "jobs", "cmds")
	if ents, _ := os.ReadDir(procsKept); len(ents) != procs+len(jobs) {
		t.Fatalf("%d processes' whole commands kept on disk, want %d", len(ents), procs+len(jobs))
	}
	if ents, _ := os.ReadDir(jobsKept); len(ents) != len(jobs) {
		t.Fatalf("%d jobs' whole commands kept on disk, want %d", len(ents), len(jobs))
	}
	if _, err := h.client().Remove(ctxT(t), api.RmParams{Exited: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().PruneJobs(ctxT(t), api.PruneJobsParams{}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{procsKept, jobsKept} {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%d whole commands left in %s after rm --exited and jobs prune", len(ents), dir)
		}
	}
}

// totalAlloc is what the test binary (the daemon and its clients) has
// allocated so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestRedTeamWholeCommandsChargedToTheShare: status of one process and
// job of one job read a whole command kept apart (200 KiB here) and charge
// it to the caller's share of the daemon's CPU (--max-cpu-per-user), as
// quick calls, without waiting: a real user's ten such calls are answered
// at once and whole, and then their next bulk work (a logs) waits for the
// share, while another user's is answered. Before, such reads were free.
// The share is a ten-thousandth of a CPU, a burst of 0.2 ms; decoding
// ten commands of 200 KiB takes some times that.
func TestRedTeamWholeCommandsChargedToTheShare(t *testing.T) {
	alice, bob := testutil.NewUser(t, "gsapart-a", "gsapart"), testutil.NewUser(t, "gsapart-b", "gsapart")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsapart" })
	cmd := []string{"true", strings.Repeat("a", 100<<10), strings.Repeat("b", 100<<10)}
	for _, u := range []testutil.User{alice, bob} {
		h.mustCtl(u, append([]string{"run", "--dir", "/", "long-" + u.Name, "--"}, cmd...)...)
		h.mustCtl(u, "run", "--dir", "/", "short-"+u.Name, "--", "echo", "up")
		h.mustCtl(u, append([]string{"submit", "--name", "job-" + u.Name, "--dir", "/", "--"}, cmd...)...)
		h.waitExit("long-" + u.Name)
		h.waitExit("short-" + u.Name)
		if j, err := h.client().WaitJob(ctxT(t), api.JobWaitParams{Name: "job-" + u.Name}, nil); err != nil || j.State != api.JobDone {
			t.Fatalf("job-%s: %v, %v", u.Name, j.State, err)
		}
	}
	h.stop() // the share, once the processes have run (a start is charged too)
	h.cfg.Limits.CPUPerUser = 0.0001
	h.start()

	a := h.rawsAsUser(alice, 2)
	for i := range 10 {
		method, params := api.MethodStatus, any(api.StatusParams{Name: "long-" + alice.Name})
		if i%2 == 1 {
			method, params = api.MethodJob, api.JobParams{Name: "job-" + alice.Name}
		}
		r := a[0].call(method, params)
		res, _ := r["result"].(map[string]any)
		if got, _ := res["cmd"].([]any); r["ok"] != true || len(got) != len(cmd) || res["cmd_truncated"] == true {
			t.Fatalf("alice's %s %d: ok %v, %d arguments; want the whole command", method, i, r["ok"], len(got))
		}
	}
	a[1].send(`{"id":1,"method":"logs","params":{"name":"short-gsapart-a","lines":-1}}`)
	if err := a[1].silentFor(time.Second); err != nil {
		t.Fatalf("alice's logs after reading ten whole commands, over her CPU share: %v", err)
	}
	if r := h.rawAsUser(bob).call(api.MethodLogs, api.LogsParams{Name: "short-" + bob.Name}); r["ok"] != true {
		t.Fatalf("bob's logs while alice waits: %v", r)
	}
}
