package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/retention"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The retention and pruning tests (issue 20): finished history is kept per
// user, within a count and an age, and removed only by its owner or root.
const (
	retGroup = "gsret"   // the socket's group
	retAlice = "gsret-a" // keeps much
	retBob   = "gsret-b" // keeps little
)

// watchRemovals subscribes to root's events and returns, from then on,
// every removal of a process or a job.
func (h *harness) watchRemovals() <-chan api.Event {
	h.t.Helper()
	ch := make(chan api.Event, 1024)
	subscribed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	c := h.client()
	go func() {
		_ = c.Events(ctx, api.EventsParams{}, func(e *api.Event) error {
			switch e.Type {
			case api.EventSubscribed:
				close(subscribed)
			case api.EventRemoved, api.EventJobRemoved:
				ch <- *e
			}
			return nil
		})
	}()
	select {
	case <-subscribed:
	case <-ctxT(h.t).Done():
		h.t.Fatal("events: never subscribed")
	}
	return ch
}

// awaitRemoved waits for removals of type typ of each of names and returns
// them by name; other removals are skipped.
func awaitRemoved(t *testing.T, ch <-chan api.Event, typ api.EventType, names ...string) map[string]api.Event {
	t.Helper()
	ctx := ctxT(t)
	got := map[string]api.Event{}
	for len(got) < len(names) {
		select {
		case e := <-ch:
			if e.Type == typ && slices.Contains(names, e.Name) {
				got[e.Name] = e
			}
		case <-ctx.Done():
			t.Fatalf("%s events: got %d of %v", typ, len(got), names)
		}
	}
	return got
}

// psNames lists the names root's ps shows.
func (h *harness) psNames(p api.PSParams) []string {
	h.t.Helper()
	procs, err := h.client().PS(ctxT(h.t), p)
	if err != nil {
		h.t.Fatal(err)
	}
	out := []string{}
	for _, p := range procs {
		out = append(out, p.Name)
	}
	return out
}

// runDone runs `true` as u (root when u is nil) under name and waits for
// its exit.
func (h *harness) runDone(u *testutil.User, name string) *api.Process {
	h.t.Helper()
	if u == nil {
		h.run(name, "true")
	} else {
		h.mustCtl(*u, "run", "--dir", "/", name, "--", "true")
	}
	return h.waitExit(name)
}

// TestRetentionKeepsNewestPerUser: with --keep-finished 2, each user keeps
// their two newest exited processes, root too; alice's pile of four takes
// nothing of bob's one; what goes goes as rm does it (logs included), with
// a removed event that says retention.
func TestRetentionKeepsNewestPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, retAlice, retGroup), testutil.NewUser(t, retBob, retGroup)
	h := newHarness(t, func(c *config.Config) {
		c.Group = retGroup
		c.Limits.KeepFinished, c.Limits.KeepFinishedFor = 2, 0
	})
	removed := h.watchRemovals()
	h.runDone(&bob, "b1")
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		h.runDone(&alice, n)
	}
	for _, n := range []string{"r1", "r2", "r3"} {
		h.runDone(nil, n)
	}
	got := awaitRemoved(t, removed, api.EventRemoved, "a1", "a2", "r1")
	for n, e := range got {
		if e.Reason != api.RemovedByRetention || e.Process == nil {
			t.Errorf("removal of %s: reason %q, process %v; want reason %q with the process", n, e.Reason, e.Process, api.RemovedByRetention)
			continue
		}
		if _, err := os.Stat(e.Process.Log); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's log %s is still there (%v)", n, e.Process.Log, err)
		}
	}
	if names, want := h.psNames(api.PSParams{}), []string{"a3", "a4", "b1", "r2", "r3"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}

// TestRetentionByLogBytesPerUser: with --keep-finished-log-bytes 1M, each
// user keeps the newest exited processes whose logs hold 1 MiB together:
// alice's three of 600 KiB keep only the newest, bob's one of 900 KiB
// stays; what goes goes with its log.
func TestRetentionByLogBytesPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, retAlice, retGroup), testutil.NewUser(t, retBob, retGroup)
	h := newHarness(t, func(c *config.Config) {
		c.Group = retGroup
		c.Limits.KeepFinished, c.Limits.KeepFinishedFor, c.Limits.KeepFinishedLogMiB = 0, 0, 1
	})
	removed := h.watchRemovals()
	write := func(u testutil.User, name string, bytes int) {
		t.Helper()
		h.mustCtl(u, "run", "--dir", "/", name, "--", "sh", "-c", "yes | head -c "+strconv.Itoa(bytes))
		if p := h.waitExit(name); logfile.Bytes(p.Log, h.cfg.LogKeep) != int64(bytes) {
			t.Fatalf("%s's log holds %d bytes, want %d", name, logfile.Bytes(p.Log, h.cfg.LogKeep), bytes)
		}
	}
	write(bob, "b1", 900<<10)
	for _, n := range []string{"a1", "a2", "a3"} {
		write(alice, n, 600<<10)
	}
	for n, e := range awaitRemoved(t, removed, api.EventRemoved, "a1", "a2") {
		if e.Reason != api.RemovedByRetention || e.Process == nil {
			t.Fatalf("removal of %s: reason %q, process %v; want reason %q with the process", n, e.Reason, e.Process, api.RemovedByRetention)
		}
		if _, err := os.Stat(e.Process.Log); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's log %s is still there (%v)", n, e.Process.Log, err)
		}
	}
	if names, want := h.psNames(api.PSParams{}), []string{"a3", "b1"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}

// TestRetentionByLogFraction: with --keep-finished-log-fraction 0.5 of a
// log directory of 8 MiB, all users' exited processes keep 4 MiB of logs
// together: alice's two of 1.5 MiB beside bob's one are past it, so alice,
// who holds the most, loses her older one with its log, down to an equal
// share; bob's stays.
func TestRetentionByLogFraction(t *testing.T) {
	const mib = 1 << 20
	alice, bob := testutil.NewUser(t, retAlice, retGroup), testutil.NewUser(t, retBob, retGroup)
	h := prepareHarness(t, func(c *config.Config) {
		c.Group = retGroup
		c.Limits.KeepFinished, c.Limits.KeepFinishedFor, c.Limits.KeepFinishedLogMiB = 0, 0, 1024
		c.Limits.KeepFinishedLogFraction, c.Limits.LogDiskFraction = 0.5, 0
		c.LogDir = testutil.Tmpfs(t, "log-fraction-exited", "8m")
	})
	h.start()
	removed := h.watchRemovals()
	write := func(u testutil.User, name string) {
		t.Helper()
		h.mustCtl(u, "run", "--dir", "/", name, "--", "sh", "-c", "yes | head -c "+strconv.Itoa(3*mib/2))
		h.waitExit(name)
	}
	write(bob, "b1")
	write(alice, "a1")
	write(alice, "a2")
	e := awaitRemoved(t, removed, api.EventRemoved, "a1")["a1"]
	if e.Reason != api.RemovedByRetention || e.Process == nil {
		t.Fatalf("removal of a1: reason %q, process %v; want reason %q with the process", e.Reason, e.Process, api.RemovedByRetention)
	}
	if _, err := os.Stat(e.Process.Log); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a1's log %s is still there (%v)", e.Process.Log, err)
	}
	if names, want := h.psNames(api.PSParams{}), []string{"a2", "b1"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}

// TestRetentionJobsPerUser: finished jobs are kept per user apart from
// processes; the older goes, and job NAME no longer finds it.
func TestRetentionJobsPerUser(t *testing.T) {
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Limits.KeepFinished, c.Limits.KeepFinishedFor = 1, 0 })
	removed := h.watchRemovals()
	h.submit(api.JobSpec{Name: "first", Cmd: []string{"true"}})
	first := h.waitJob("first")
	h.submit(api.JobSpec{Name: "second", Cmd: []string{"true"}})
	h.waitJob("second")
	e := awaitRemoved(t, removed, api.EventJobRemoved, "first")["first"]
	if e.Reason != api.RemovedByRetention || e.Job == nil || e.Job.ID != first.ID {
		t.Errorf("job_removed event %+v: want first (%s) with reason retention", e, first.ID)
	}
	if _, err := h.client().Job(ctxT(t), first.ID); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("job %s after its removal: %v, want not_found", first.ID, err)
	}
	jobs, err := h.client().Jobs(ctxT(t), api.JobsParams{States: []api.JobState{api.JobsFinished}})
	if err != nil || len(jobs) != 1 || jobs[0].Name != "second" {
		t.Errorf("finished jobs %v (%v), want second alone", jobs, err)
	}
}

// TestRetentionAge: with --keep-finished-for, an exited process and a
// finished job go once that long has passed since they ended, never
// before; a live process stays whatever its age.
func TestRetentionAge(t *testing.T) {
	const keepFor = 300 * time.Millisecond
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Limits.KeepFinished, c.Limits.KeepFinishedFor = 0, keepFor })
	removed := h.watchRemovals()
	h.run("live", "sleep", "100000")
	old := h.runDone(nil, "old")
	h.submit(api.JobSpec{Name: "oldjob", Cmd: []string{"true"}})
	job := h.waitJob("oldjob")
	p := awaitRemoved(t, removed, api.EventRemoved, "old")["old"]
	j := awaitRemoved(t, removed, api.EventJobRemoved, "oldjob")["oldjob"]
	if p.Reason != api.RemovedByRetention || p.Time.Before(old.ExitedAt.Add(keepFor)) {
		t.Errorf("old removed at %v (reason %q); it exited at %v: want reason retention, not before %v", p.Time, p.Reason, old.ExitedAt, keepFor)
	}
	if j.Reason != api.RemovedByRetention || j.Time.Before(job.EndedAt.Add(keepFor)) {
		t.Errorf("oldjob removed at %v (reason %q); it ended at %v: want reason retention, not before %v", j.Time, j.Reason, job.EndedAt, keepFor)
	}
	if names := h.psNames(api.PSParams{}); !slices.Contains(names, "live") {
		t.Errorf("processes %v: the live one was removed", names)
	}
}

// TestRmSeveralAndExitedAsUsers: rm of several names removes each the
// caller may remove and answers for each other; --exited removes all of
// the caller's exited processes and nothing of anyone else's; only root
// removes another user's.
func TestRmSeveralAndExitedAsUsers(t *testing.T) {
	alice, bob := testutil.NewUser(t, retAlice, retGroup), testutil.NewUser(t, retBob, retGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = retGroup })
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		h.runDone(&alice, n)
	}
	h.mustCtl(alice, "run", "--dir", "/", "alive", "--", "sleep", "100000")
	h.runDone(&bob, "b1")
	h.runDone(&bob, "b2")
	b1 := h.holding("b1")

	out, stderr, code := h.ctlAs(alice, "rm", "a1", retBob+"/b1", "alive", "nope", "a2", "a1")
	if code != 1 || out != "removed a1\nremoved a2\n" {
		t.Errorf("rm of several: exit %d, stdout %q; want 1 and a1, a2 removed", code, out)
	}
	for _, want := range []string{"rm " + retBob + "/b1: process \"" + retBob + "/b1\" belongs to " + retBob, "(permission_denied)", "rm alive: process \"alive\" is running; kill it before rm (conflict)", "rm nope: process \"nope\" not found (not_found)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rm of several: stderr %q lacks %q", stderr, want)
		}
	}
	h.intact(b1)

	if _, stderr, code := h.ctlAs(bob, "rm", "--exited", "--user", retAlice); code == 0 || !strings.Contains(stderr, "permission_denied") {
		t.Errorf("bob's rm --exited --user alice: exit %d, stderr %q; want permission_denied", code, stderr)
	}
	if out := h.mustCtl(alice, "rm", "--exited"); out != "removed a3\nremoved a4\n" {
		t.Errorf("alice's rm --exited: %q, want a3 and a4", out)
	}
	h.intact(b1)
	if names, want := h.psNames(api.PSParams{}), []string{"alive", "b1", "b2"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
	res, err := h.client().Remove(ctxT(t), api.RmParams{Exited: true, User: retBob})
	if err != nil || len(res.Removed) != 2 || len(res.Failed) != 0 {
		t.Fatalf("root's rm --exited --user bob: %+v, %v; want b1 and b2", res, err)
	}
	if names, want := h.psNames(api.PSParams{}), []string{"alive"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}

// TestJobsPruneAndStateFiltersAsUsers: ps and jobs filter by state on the
// daemon's side; finished jobs stay queryable until jobs prune, which
// takes only the caller's (root: anyone's).
func TestJobsPruneAndStateFiltersAsUsers(t *testing.T) {
	alice, bob := testutil.NewUser(t, retAlice, retGroup), testutil.NewUser(t, retBob, retGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = retGroup })
	h.mustCtl(alice, "submit", "--name", "ok", "--dir", "/", "--", "true")
	h.mustCtl(alice, "submit", "--name", "bad", "--dir", "/", "--", "false")
	h.mustCtl(bob, "submit", "--name", "bobs", "--dir", "/", "--", "true")
	for _, n := range []string{"ok", "bad", "bobs"} {
		h.waitJob(n)
	}
	h.mustCtl(alice, "run", "--dir", "/", "alive", "--", "sleep", "100000")

	jobNames := func(u testutil.User, args ...string) []string {
		t.Helper()
		var res api.JobsResult
		if err := json.Unmarshal([]byte(h.mustCtl(u, append([]string{"--json", "jobs"}, args...)...)), &res); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, j := range res.Jobs {
			out = append(out, j.Name)
		}
		return out
	}
	if got := jobNames(alice, "--state", "finished"); !slices.Equal(got, []string{"ok", "bad"}) {
		t.Errorf("alice's finished jobs %v, want ok, bad", got)
	}
	if got := jobNames(alice, "--state", "failed,queued"); !slices.Equal(got, []string{"bad"}) {
		t.Errorf("alice's failed or queued jobs %v, want bad", got)
	}
	var ps api.PSResult
	if err := json.Unmarshal([]byte(h.mustCtl(alice, "--json", "ps", "--state", "exited")), &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps.Processes) != 2 || ps.Processes[0].Name != "bad" || ps.Processes[1].Name != "ok" {
		t.Errorf("alice's exited processes %+v, want bad and ok", ps.Processes)
	}

	if _, stderr, code := h.ctlAs(bob, "jobs", "prune", "--user", retAlice); code == 0 || !strings.Contains(stderr, "permission_denied") {
		t.Errorf("bob's jobs prune --user alice: exit %d, stderr %q; want permission_denied", code, stderr)
	}
	if out := h.mustCtl(alice, "jobs", "prune"); !strings.Contains(out, "removed ok ") || !strings.Contains(out, "removed bad ") || strings.Count(out, "\n") != 2 {
		t.Errorf("alice's jobs prune: %q, want ok and bad", out)
	}
	if _, stderr, code := h.ctlAs(alice, "job", "ok"); code == 0 || !strings.Contains(stderr, "not_found") {
		t.Errorf("job ok after its prune: exit %d, stderr %q; want not_found", code, stderr)
	}
	if got := jobNames(bob, "--state", "finished"); !slices.Equal(got, []string{"bobs"}) {
		t.Errorf("bob's finished jobs after alice's prune %v, want bobs", got)
	}
	jobs, err := h.client().PruneJobs(ctxT(t), api.PruneJobsParams{User: retBob})
	if err != nil || len(jobs) != 1 || jobs[0].Name != "bobs" {
		t.Errorf("root's prune of bob's jobs: %v, %v", jobs, err)
	}
}

// TestRetentionBadInput: bad rm, ps, jobs and prune_jobs params are a
// clear invalid_argument (or permission_denied) and change nothing.
func TestRetentionBadInput(t *testing.T) {
	h := newHarness(t)
	h.runDone(nil, "keep")
	rc := h.raw()
	for _, tt := range []struct {
		method string
		params any
		code   api.Code
		msg    string
	}{
		{"rm", map[string]any{"names": []string{}}, api.CodeInvalidArgument, "rm: names is empty"},
		{"rm", map[string]any{"names": []string{"keep", "../etc"}}, api.CodeInvalidArgument, `rm: name "../etc"`},
		{"rm", map[string]any{"names": []string{"keep", ""}}, api.CodeInvalidArgument, "rm: name is empty"},
		{"rm", map[string]any{"name": "keep", "names": []string{"keep"}}, api.CodeInvalidArgument, "give name or names, not both"},
		{"rm", map[string]any{"names": []string{"keep"}, "exited": true}, api.CodeInvalidArgument, "give names or exited, not both"},
		{"rm", map[string]any{"name": "keep", "user": "root"}, api.CodeInvalidArgument, "user goes only with exited"},
		{"ps", map[string]any{"states": []string{"exited", "zombie"}}, api.CodeInvalidArgument, `ps: unknown state "zombie"`},
		{"ps", map[string]any{"states": []string{}}, api.CodeInvalidArgument, "ps: states is empty"},
		{"jobs", map[string]any{"states": []string{"finished", "nope"}}, api.CodeInvalidArgument, `jobs: unknown state "nope"`},
		{"jobs", map[string]any{"state": "done", "states": []string{"failed"}}, api.CodeInvalidArgument, "give state or states, not both"},
		{"prune_jobs", map[string]any{"nope": true}, api.CodeInvalidArgument, "prune_jobs: bad params"},
	} {
		resp := rc.call(tt.method, tt.params)
		if msg, _ := resp["error"].(string); resp["code"] != string(tt.code) || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s %v: %v; want %s with %q", tt.method, tt.params, resp, tt.code, tt.msg)
		}
	}
	if names := h.psNames(api.PSParams{}); !slices.Equal(names, []string{"keep"}) {
		t.Errorf("processes %v after bad calls, want keep", names)
	}
}

// tableAndQueue is a daemon of a process table and a job queue alone, their
// stores in a fresh directory, which it returns too.
func tableAndQueue(t *testing.T) (*Daemon, string) {
	t.Helper()
	dir := t.TempDir()
	pst, err := store.OpenRecords(filepath.Join(dir, "procs"))
	if err != nil {
		t.Fatal(err)
	}
	jst, err := store.OpenRecords(filepath.Join(dir, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	return &Daemon{table: proctable.New(pst, nil), jobs: jobqueue.New(jst, nil)}, dir
}

// TestFinishedProcsLeavesLiveAndUnsettled: what retention and rm --exited
// may take is only exited records: never a hibernated process (it can
// still be thawed) nor the process of a job attempt the queue has not
// settled from it yet.
func TestFinishedProcsLeavesLiveAndUnsettled(t *testing.T) {
	d, _ := tableAndQueue(t)
	for _, r := range []proctable.Record{
		{ID: "p-done", Name: "done", State: api.StateExited},
		{ID: "p-hib", Name: "hib", State: api.StateHibernated, Snapshot: "s"},
		{ID: "p-attempt", Name: "attempt", State: api.StateExited},
		{ID: "p-settled", Name: "settled", State: api.StateExited},
	} {
		r.Cmd = []string{"true"}
		if _, err := d.table.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := d.jobs.Add([]*jobqueue.Job{
		{Name: "attempt", Cmd: []string{"true"}, GPUs: 1, State: api.JobRunning, Proc: "p-attempt"},
		{Name: "settled", Cmd: []string{"true"}, GPUs: 1, State: api.JobDone, Proc: "p-settled"},
	})
	if err != nil || len(jobs) != 2 {
		t.Fatal(err)
	}
	var names []string
	for _, r := range d.finishedProcs() {
		names = append(names, r.Name)
	}
	if want := []string{"done", "settled"}; !slices.Equal(names, want) {
		t.Fatalf("finished %v, want %v", names, want)
	}
}

// TestRetentionReadsEachExitedLogOnce: a retention pass reads the size of
// an exited process's logs once (they no longer grow), and forgets it with
// the record: a pass costs the newly exited processes' reads, not a read
// of every process each user keeps.
func TestRetentionReadsEachExitedLogOnce(t *testing.T) {
	d, dir := tableAndQueue(t)
	for _, name := range []string{"a", "b"} {
		log := filepath.Join(dir, name+".log")
		if err := os.WriteFile(log, []byte("ten bytes\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := d.table.Create(proctable.Record{ID: "p-" + name, Name: name, Cmd: []string{"true"}, State: api.StateExited, LogPath: log}); err != nil {
			t.Fatal(err)
		}
	}
	p, sizes := retention.Policy{Bytes: 1 << 30}, logSizes{}
	d.retainProcs(context.Background(), p, sizes, time.Now())
	if want := (logSizes{"p-a": 10, "p-b": 10}); !maps.Equal(sizes, want) {
		t.Fatalf("after the first pass: %v, want %v", sizes, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.log"), make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.table.Remove(proctable.Key{Name: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	d.retainProcs(context.Background(), p, sizes, time.Now())
	if want := (logSizes{"p-a": 10}); !maps.Equal(sizes, want) {
		t.Fatalf("after the second pass: %v, want %v (a's read once, b's forgotten)", sizes, want)
	}
}
