package daemon

import (
	"encoding/json"
	"fmt"
	"os/user"
	"sort"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// abuseOwner is a user whose resources the non-root caller attacks.
type abuseOwner struct {
	user  *user.User
	uid   uint32
	p     string // name prefix of its processes and jobs
	gpu   int    // GPU its lease and filler hold
	snap  string // snapshot of its hibernated process
	lease string // id of its lease
}

// abuseRow is one attempt by the non-root caller: a method with params
// built for one owner's resources, and the refusal it must meet (code), or
// for calls that may succeed (lists), a check of what it shows.
type abuseRow struct {
	label  string
	method string
	params func(o *abuseOwner) any
	code   api.Code
	snap   bool // needs the owner's snapshot
	// subscribe: an events stream, which must start with "subscribed"
	// (it never ends by itself, so it gets a connection of its own).
	subscribe bool
	check     func(t *testing.T, result json.RawMessage, o *abuseOwner)
}

// abuseRows covers every method of the protocol; TestAbuseNonRootEveryMethod
// fails when the daemon has a method with no row here.
func abuseRows(nobodyUID uint32) []abuseRow {
	name := func(suffix string) func(o *abuseOwner) any {
		return func(o *abuseOwner) any { return map[string]any{"name": o.p + suffix} }
	}
	// Process names are per user: the caller names another user's
	// process as USER/NAME; NAME alone is the caller's own (not_found).
	ref := func(o *abuseOwner, suffix string) string { return o.user.Username + "/" + o.p + suffix }
	named := func(suffix string) func(o *abuseOwner) any {
		return func(o *abuseOwner) any { return map[string]any{"name": ref(o, suffix)} }
	}
	denied, invalid := api.CodePermissionDenied, api.CodeInvalidArgument
	return []abuseRow{
		{label: "hello", method: api.MethodHello, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var h api.Hello
			decodeInto(t, r, &h)
			if h.Caller.UID != nobodyUID {
				t.Fatalf("hello sees uid %d, want %d", h.Caller.UID, nobodyUID)
			}
		}},
		{label: "run over exited name", method: api.MethodRun, code: invalid, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-exited"), "cmd": []string{"true"}, "dir": "/"}
		}},
		{label: "run as owner", method: api.MethodRun, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": "escalate", "cmd": []string{"id"}, "dir": "/", "user": o.user.Username}
		}},
		{label: "run live name", method: api.MethodRun, code: invalid, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-run"), "cmd": []string{"true"}, "dir": "/"}
		}},
		{label: "kill", method: api.MethodKill, code: denied, params: named("-run")},
		{label: "kill signal", method: api.MethodKill, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-run"), "signal": "KILL"}
		}},
		{label: "kill frozen", method: api.MethodKill, code: denied, params: named("-frozen")},
		{label: "status", method: api.MethodStatus, code: denied, params: named("-run")},
		{label: "status of the name alone", method: api.MethodStatus, code: api.CodeNotFound, params: name("-run")},
		{label: "kill of the name alone", method: api.MethodKill, code: api.CodeNotFound, params: name("-run")},
		{label: "status overview", method: api.MethodStatus, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var s api.Status
			decodeInto(t, r, &s)
			if s.Processes != 0 || len(s.Jobs) != 0 || s.Leases != 0 {
				t.Fatalf("overview shows others' work: %d processes, jobs %v, %d leases", s.Processes, s.Jobs, s.Leases)
			}
		}},
		{label: "ps", method: api.MethodPS, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var ps api.PSResult
			decodeInto(t, r, &ps)
			if len(ps.Processes) != 0 {
				t.Fatalf("ps shows %+v", ps.Processes)
			}
		}},
		{label: "ps of owner", method: api.MethodPS, params: func(o *abuseOwner) any { return map[string]any{"user": o.user.Username} },
			check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
				var ps api.PSResult
				decodeInto(t, r, &ps)
				if len(ps.Processes) != 0 {
					t.Fatalf("ps --user %s shows %+v", o.user.Username, ps.Processes)
				}
			}},
		{label: "rm", method: api.MethodRm, code: denied, params: named("-exited")},
		{label: "rm names", method: api.MethodRm, params: func(o *abuseOwner) any { return map[string]any{"names": []string{ref(o, "-exited")}} },
			check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
				var res api.RmResult
				decodeInto(t, r, &res)
				if len(res.Removed) != 0 || len(res.Failed) != 1 || res.Failed[0].Code != denied {
					t.Fatalf("rm of another's name: %+v, want it failed with %s", res, denied)
				}
			}},
		{label: "rm exited", method: api.MethodRm, params: func(o *abuseOwner) any { return map[string]any{"exited": true} },
			check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
				var res api.RmResult
				decodeInto(t, r, &res)
				if len(res.Removed) != 0 || len(res.Failed) != 0 {
					t.Fatalf("rm --exited touched others': %+v", res)
				}
			}},
		{label: "rm exited of owner", method: api.MethodRm, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"exited": true, "user": o.user.Username}
		}},
		{label: "ps exited", method: api.MethodPS, params: func(o *abuseOwner) any { return map[string]any{"states": []string{"exited"}} },
			check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
				var ps api.PSResult
				decodeInto(t, r, &ps)
				if len(ps.Processes) != 0 {
					t.Fatalf("ps --state exited shows %+v", ps.Processes)
				}
			}},
		{label: "gpus", method: api.MethodGPUs, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var g api.GPUsResult
			decodeInto(t, r, &g)
			for _, d := range g.GPUs {
				for _, p := range d.Processes {
					if p.Managed != "" {
						t.Fatalf("gpus names another user's process %q", p.Managed)
					}
				}
			}
		}},
		{label: "freeze", method: api.MethodFreeze, code: denied, params: named("-run")},
		{label: "thaw", method: api.MethodThaw, code: denied, params: named("-frozen")},
		{label: "thaw hibernated", method: api.MethodThaw, code: denied, params: named("-hib")},
		{label: "swap", method: api.MethodSwap, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"freeze": ref(o, "-run"), "thaw": ref(o, "-frozen")}
		}},
		{label: "activate", method: api.MethodActivate, code: denied, params: named("-frozen")},
		{label: "activate hibernated", method: api.MethodActivate, code: denied, params: named("-hib")},
		{label: "activate hold", method: api.MethodActivate, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-run"), "hold": true}
		}},
		{label: "migrate", method: api.MethodMigrate, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-frozen"), "gpu": 1 - o.gpu}
		}},
		{label: "hibernate", method: api.MethodHibernate, code: denied, params: named("-frozen")},
		{label: "fork", method: api.MethodFork, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-hib"), "copies": 1}
		}},
		{label: "snapshots", method: api.MethodSnapshots, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var s api.SnapshotsResult
			decodeInto(t, r, &s)
			if len(s.Snapshots) != 0 {
				t.Fatalf("snapshots shows %+v", s.Snapshots)
			}
		}},
		{label: "snapshots of process", method: api.MethodSnapshots, params: named("-hib"), check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var s api.SnapshotsResult
			decodeInto(t, r, &s)
			if len(s.Snapshots) != 0 {
				t.Fatalf("snapshots --name shows %+v", s.Snapshots)
			}
		}},
		{label: "delete_snapshot", method: api.MethodDeleteSnapshot, code: denied, snap: true, params: func(o *abuseOwner) any { return map[string]any{"id": o.snap} }},
		{label: "set", method: api.MethodSet, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-run"), "ttl": "1m"}
		}},
		{label: "set lower", method: api.MethodSet, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-hib"), "priority": -5}
		}},
		{label: "logs", method: api.MethodLogs, code: denied, params: named("-run")},
		{label: "logs follow", method: api.MethodLogs, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": ref(o, "-run"), "follow": true}
		}},
		{label: "wait", method: api.MethodWait, code: denied, params: named("-run")},
		// A name need not exist, so events of another's name subscribe
		// and then leave its events out (docs/protocol.md).
		{label: "events", method: api.MethodEvents, subscribe: true, params: named("-run")},
		{label: "submit as owner", method: api.MethodSubmit, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"name": "escalate", "cmd": []string{"true"}, "dir": "/", "user": o.user.Username}
		}},
		{label: "jobs", method: api.MethodJobs, params: func(o *abuseOwner) any { return map[string]any{"all": true} },
			check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
				var j api.JobsResult
				decodeInto(t, r, &j)
				if len(j.Jobs) != 0 {
					t.Fatalf("jobs shows %+v", j.Jobs)
				}
			}},
		{label: "job", method: api.MethodJob, code: denied, params: named("-job")},
		{label: "prune_jobs", method: api.MethodPruneJobs, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var j api.JobsResult
			decodeInto(t, r, &j)
			if len(j.Jobs) != 0 {
				t.Fatalf("prune_jobs removed others' %+v", j.Jobs)
			}
		}},
		{label: "prune_jobs of owner", method: api.MethodPruneJobs, code: denied, params: func(o *abuseOwner) any {
			return map[string]any{"user": o.user.Username}
		}},
		{label: "cancel", method: api.MethodCancel, code: denied, params: named("-job")},
		{label: "job_wait", method: api.MethodJobWait, code: denied, params: named("-job")},
		{label: "acquire held gpu", method: api.MethodAcquire, code: api.CodeResourceExhausted, params: func(o *abuseOwner) any {
			return map[string]any{"gpu_ids": []int{o.gpu}}
		}},
		{label: "release", method: api.MethodRelease, code: denied, params: func(o *abuseOwner) any { return map[string]any{"id": o.lease} }},
		{label: "leases", method: api.MethodLeases, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var l api.LeasesResult
			decodeInto(t, r, &l)
			if len(l.Leases) != 0 {
				t.Fatalf("leases shows %+v", l.Leases)
			}
		}},
		{label: "fill", method: api.MethodFill, code: api.CodeConflict, params: func(o *abuseOwner) any {
			return map[string]any{"gpu": o.gpu, "ratio": 0.5}
		}},
		{label: "unfill", method: api.MethodUnfill, code: denied, params: func(o *abuseOwner) any { return map[string]any{"gpu": o.gpu} }},
		// Every filler is listed, whoever owns it (docs/protocol.md).
		{label: "fillers", method: api.MethodFillers, check: func(t *testing.T, r json.RawMessage, o *abuseOwner) {
			var f api.FillersResult
			decodeInto(t, r, &f)
			if len(f.Fillers) != 2 {
				t.Fatalf("fillers shows %+v, want both", f.Fillers)
			}
		}},
	}
}

func decodeInto(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
}

// TestAbuseNonRootEveryMethod has a non-root caller (nobody) try every
// protocol method on the processes, frozen and hibernated processes,
// snapshots, jobs, leases and fillers of root and of another non-root
// user (daemon): each is refused with its documented code and changes
// nothing, and lists leave out what is not the caller's.
func TestAbuseNonRootEveryMethod(t *testing.T) {
	nobody, group := nobodyUser(t)
	other, err := user.Lookup("daemon")
	if err != nil {
		t.Skip("no user daemon to own the second user's resources")
	}
	criu := testutil.CRIU(t)
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.CRIU = group.Name, criu
		c.Limits.FillFraction = 0 // daemon's filler holds 0.9 of its GPU
	})
	owners := []*abuseOwner{
		{user: &user.User{Uid: "0", Gid: "0", Username: "root"}, uid: 0, p: "root", gpu: 0},
		{user: other, uid: uint32(mustAtoi(t, other.Uid)), p: "daemon", gpu: 1},
	}
	// Each owner's connection holds its lease; it stays open.
	conns := map[string]*rawConn{"root": h.raw(), "daemon": h.rawAs(other, group.Gid)}
	for _, o := range owners {
		as := ""
		if o.uid != 0 {
			as = o.user.Username
		}
		run := func(name string, gpu int, cmd ...string) {
			_, err := h.client().Run(ctxT(t), api.RunParams{Name: name, Dir: "/", User: as, GPU: &api.GPURef{Index: gpu}, Cmd: cmd,
				Env: map[string]string{"PATH": "/usr/bin:/bin"}})
			if err != nil {
				t.Fatalf("run %s: %v", name, err)
			}
		}
		run(o.p+"-run", o.gpu, "sleep", "1000")
		run(o.p+"-exited", o.gpu, "true")
		h.waitExit(o.p + "-exited")
		run(o.p+"-frozen", o.gpu, h.bins.SimJob, "--vram", "16", "--tick", "0.02")
		h.followCount(o.p+"-frozen", "simjob: allocated", 1)
		if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: o.p + "-frozen"}); err != nil {
			t.Fatal(err)
		}
		run(o.p+"-hib", o.gpu, h.bins.SimJob, "--vram", "16", "--host-mem", "1", "--tick", "0.02")
		h.followCount(o.p+"-hib", "tick 3", 1)
		// CRIU refuses to dump a non-root task in its own PID namespace
		// ("can't dump unprivileged task whose /proc doesn't belong to
		// it"), so only root's process is hibernated; the other's stays
		// frozen.
		if o.uid == 0 {
			hr, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: o.p + "-hib"})
			if err != nil {
				t.Fatal(err)
			}
			o.snap = hr.Snapshot
		} else if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: o.p + "-hib"}); err != nil {
			t.Fatal(err)
		}
		resp := conns[o.p].call(api.MethodAcquire, map[string]any{"gpu_ids": []int{o.gpu}, "min_free": "64M"})
		if resp["ok"] != true {
			t.Fatalf("%s's lease: %v", o.p, resp)
		}
		o.lease = resp["result"].(map[string]any)["id"].(string)
	}
	for _, o := range owners {
		if resp := conns[o.p].call(api.MethodFill, map[string]any{"gpu": o.gpu, "ratio": 0.9}); resp["ok"] != true {
			t.Fatalf("%s's filler: %v", o.p, resp)
		}
	}
	// Needing both GPUs' memory, each job waits on the other user's filler.
	for _, o := range owners {
		h.submit(api.JobSpec{Name: o.p + "-job", Cmd: []string{"sleep", "1000"}, VRAM: gib(3), GPUs: 2, User: o.user.Username})
		if j := h.job(o.p + "-job"); j.State != api.JobQueued {
			t.Fatalf("job %s is %s, want queued", j.Name, j.State)
		}
	}

	before := h.abuseState()
	for _, want := range []string{"root-run running", "daemon-frozen frozen", "root-hib hibernated", "job daemon-job queued", "lease " + owners[1].lease} {
		if !strings.Contains(before, want) {
			t.Fatalf("set-up state lacks %q:\n%s", want, before)
		}
	}
	rows := abuseRows(uint32(mustAtoi(t, nobody.Uid)))
	covered := map[string]bool{}
	as := h.rawAs(nobody, group.Gid)
	for _, row := range rows {
		covered[row.method] = true
		for _, o := range owners {
			t.Run(row.label+"/"+o.p, func(t *testing.T) {
				if row.snap && o.snap == "" {
					t.Skipf("%s has no snapshot (see above)", o.p)
				}
				var params any
				if row.params != nil {
					params = row.params(o)
				}
				if row.subscribe {
					sub := h.rawAs(nobody, group.Gid)
					b, _ := json.Marshal(map[string]any{"method": row.method, "params": params})
					sub.send(string(b))
					if ev, _ := sub.recv()["event"].(map[string]any); ev == nil || ev["type"] != string(api.EventSubscribed) {
						t.Errorf("%s: first line is not the subscribed event: %v", row.method, ev)
					}
					sub.c.Close()
				} else if resp := as.call(row.method, params); row.code != "" {
					if resp["ok"] != false || resp["code"] != string(row.code) {
						t.Errorf("%s %v: got %v, want code %s", row.method, params, resp, row.code)
					} else if msg, _ := resp["error"].(string); msg == "" {
						t.Errorf("%s: no message", row.method)
					}
				} else if resp["ok"] != true {
					t.Errorf("%s %v: %v", row.method, params, resp)
				} else {
					raw, _ := json.Marshal(resp["result"])
					row.check(t, raw, o)
				}
				if after := h.abuseState(); after != before {
					t.Fatalf("%s changed the daemon's state:\nbefore:\n%s\nafter:\n%s", row.label, before, after)
				}
			})
		}
	}
	var missing []string
	for m := range h.d.methods {
		if !covered[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("methods with no row in abuseRows (add one): %v", missing)
	}
}

// abuseState is what a non-root caller must not change: every process
// (state, pid, snapshot), job, lease, filler and snapshot, as root sees
// them.
func (h *ckptHarness) abuseState() string {
	h.t.Helper()
	c, ctx := h.client(), ctxT(h.t)
	var b strings.Builder
	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range ps {
		fmt.Fprintf(&b, "%s %s pid=%d uid=%d snap=%s policy=%+v\n", p.Name, p.State, p.PID, p.UID, p.Snapshot, p.Policy)
	}
	jobs, err := c.Jobs(ctx, api.JobsParams{All: true})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Fprintf(&b, "job %s %s uid=%d\n", j.Name, j.State, j.UID)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range leases {
		fmt.Fprintf(&b, "lease %s uid=%d gpus=%v\n", l.ID, l.UID, l.GPUs)
	}
	fillers, err := c.Fillers(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range fillers {
		fmt.Fprintf(&b, "filler %d uid=%d target=%d\n", f.Index, f.UID, f.TargetMiB)
	}
	snaps, err := c.Snapshots(ctx, api.SnapshotsParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, s := range snaps.Snapshots {
		fmt.Fprintf(&b, "snapshot %s uid=%d holds=%v\n", s.ID, s.UID, s.Holds)
	}
	return b.String()
}
