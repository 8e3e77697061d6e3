package cli

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

const (
	snapA = "eb61454e-7176-4f3b-9a2b-4c3f226f88f6"
	snapB = "056247a3-e60d-4dd0-9270-44e0af032778"
	snapC = "05aa0000-0000-4000-8000-000000000000"
)

var hibernatedTrain = api.HibernateResult{Name: "train", State: api.StateHibernated, Snapshot: snapB, Parent: snapA,
	Bytes: 56 << 20, Written: 54 << 20, Pages: 17135, Reused: 3407, GPUBytes: 8 << 30,
	MS: map[string]float64{"freeze": 3.1, "dump": 743, "sync": 0.5, "total": 796.2}}

func TestHibernate(t *testing.T) {
	full := hibernatedTrain
	full.Parent, full.Reused, full.GPUBytes = "", 0, 0
	full.MS = map[string]float64{"dump": 743, "total": 796.2}
	tests := []struct {
		args     []string
		res      api.HibernateResult
		full     bool
		lockWait time.Duration
		want     string
	}{
		{[]string{"hibernate", "train"}, hibernatedTrain, false, 0,
			"hibernated train to snapshot " + snapB + " in 796ms (freeze 3.10ms, dump 743ms, sync 0.50ms)\n" +
				"wrote 54.0 MiB; 3407 of 17135 pages reused from parent eb61454e; 8.0 GiB of GPU memory in the image\n"},
		{[]string{"hibernate", "--full", "train", "--lock-timeout", "30s"}, full, true, 30 * time.Second,
			"hibernated train to snapshot " + snapB + " in 796ms (dump 743ms)\n" +
				"wrote 54.0 MiB; full image of 17135 pages; no GPU memory in the image\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodHibernate: answer(result(tt.res))})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" || out != tt.want {
				t.Fatalf("code %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, tt.want)
			}
			var p api.HibernateParams
			d.params(t, api.MethodHibernate, &p)
			if p.Name != "train" || p.Full != tt.full || time.Duration(p.LockTimeout) != tt.lockWait {
				t.Errorf("params %+v", p)
			}
		})
	}
}

func TestHibernateFails(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodHibernate: answer(failure(api.CodeUnavailable,
		"the disk tier is off: --criu none (scripts/install-criu.sh installs CRIU; see --criu)"))})
	out, errOut, code := ctl(t, d, "hibernate", "train")
	want := "gpuschedctl: the disk tier is off: --criu none (scripts/install-criu.sh installs CRIU; see --criu) (unavailable)\n"
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestThawFromDisk(t *testing.T) {
	res := thawedTrain
	res.Snapshot = snapB
	res.MS = map[string]float64{"admit": 0.01, "criu_restore": 111, "continue": 0.3, "restore": 5, "unlock": 1, "total": 120}
	d := newFakeDaemon(t, map[string]handler{api.MethodThaw: answer(result(res))})
	out, errOut, code := ctl(t, d, "thaw", "train")
	want := "thawed train from disk (snapshot 056247a3): 512 MiB from 1 CUDA process onto GPU-aaaa in 120ms " +
		"(admit 0.01ms, criu_restore 111ms, continue 0.30ms, restore 5.00ms, unlock 1.00ms) [api driver]\n"
	if code != 0 || errOut != "" || out != want {
		t.Fatalf("code %d, stderr %q, stdout\n%q\nwant\n%q", code, errOut, out, want)
	}
}

func TestFork(t *testing.T) {
	one, two := proc("train-1"), proc("train-2")
	two.PID = 4343
	res := api.ForkResult{Name: "train", Copies: []api.Process{one, two}, Bytes: 19 << 20,
		MS: map[string]float64{"dump": 380, "train-1": 200, "train-2": 210, "total": 800}}
	d := newFakeDaemon(t, map[string]handler{api.MethodFork: answer(result(res))})
	out, errOut, code := ctl(t, d, "fork", "train", "--copies", "2", "--gpus", "0,GPU-bbbb", "--timeout", "1m")
	want := "forked train into 2 copies from a 19.0 MiB image in 800ms (dump 380ms, train-1 200ms, train-2 210ms)\n" +
		"train-1: running, pid 4242\n" +
		"train-2: running, pid 4343\n"
	if code != 0 || errOut != "" || out != want {
		t.Fatalf("code %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	var p api.ForkParams
	d.params(t, api.MethodFork, &p)
	wantP := api.ForkParams{Name: "train", Copies: 2, GPUs: []api.GPURef{{Index: 0}, {UUID: "GPU-bbbb"}}, Timeout: api.Duration(time.Minute)}
	if !reflect.DeepEqual(p, wantP) {
		t.Errorf("params %+v, want %+v", p, wantP)
	}
}

func TestForkWithoutGPUsSendsNone(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodFork: answer(result(api.ForkResult{Name: "train", Copies: []api.Process{}}))})
	if _, errOut, code := ctl(t, d, "fork", "train", "--copies", "3"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if got, want := string(d.only(t).Params), `{"name":"train","copies":3}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
}

func TestSnapshots(t *testing.T) {
	now := time.Now()
	res := api.SnapshotsResult{
		Snapshots: []api.Snapshot{
			{ID: snapA, Name: "train", User: "alice", Holds: true, Bytes: 14 << 20, Written: 14 << 20, GPUs: []string{}, CreatedAt: now.Add(-3 * time.Hour)},
			{ID: snapB, Name: "train", User: "alice", Parent: snapA, Holds: true, Bytes: 680 << 10, GPUs: []string{}, CreatedAt: now.Add(-90 * time.Second)},
			{ID: snapC, Name: "eval", User: "bob", Bytes: 1536 << 20, GPUs: []string{}, CreatedAt: now.Add(-30 * time.Second)},
		},
		Bytes: 14<<20 + 680<<10 + 1536<<20, Budget: 500 << 30,
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodSnapshots: answer(result(res))})
	out, errOut, code := ctl(t, d, "snapshots", "--name", "train")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"ID        NAME   USER   PARENT    HOLDS  SIZE       CREATED\n" +
		"eb61454e  train  alice  -         yes    14.0 MiB   3h ago\n" +
		"056247a3  train  alice  eb61454e  yes    680.0 KiB  1m ago\n" +
		"05aa0000  eval   bob    -         no     1.5 GiB    30s ago\n" +
		"3 snapshots listed; all snapshots take 1.5 GiB of disk (budget 500.0 GiB)\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	var p api.SnapshotsParams
	d.params(t, api.MethodSnapshots, &p)
	if p.Name != "train" {
		t.Errorf("name = %q, want train", p.Name)
	}
}

func TestSnapshotsEmpty(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodSnapshots: answer(result(api.SnapshotsResult{Snapshots: []api.Snapshot{}}))})
	for _, args := range [][]string{{"snapshots"}, {"snapshot"}} {
		out, errOut, code := ctl(t, d, args...)
		want := "ID  NAME  USER  PARENT  HOLDS  SIZE  CREATED\n0 snapshots listed; all snapshots take 0 B of disk (budget unlimited)\n"
		if code != 0 || errOut != "" || out != want {
			t.Errorf("%v: code %d, stderr %q, stdout %q", args, code, errOut, out)
		}
	}
	for _, req := range d.requests() {
		if len(req.Params) != 0 && string(req.Params) != "{}" {
			t.Errorf("snapshots without --name sent params %s", req.Params)
		}
	}
}

func TestSnapshotRm(t *testing.T) {
	list := api.SnapshotsResult{Snapshots: []api.Snapshot{{ID: snapA}, {ID: snapB}, {ID: snapC}}}
	deleted := api.Snapshot{ID: snapA, Name: "train", User: "alice", Bytes: 14 << 20, GPUs: []string{}}
	tests := []struct {
		name    string
		args    []string
		del     api.Response
		wantIDs []string // delete_snapshot ids sent; nil: none
		code    int
		stdout  string
		stderr  string
	}{
		{"whole id", []string{"snapshot", "rm", snapA}, result(deleted), []string{snapA}, 0,
			"removed snapshot " + snapA + " of train (14.0 MiB)\n", ""},
		{"prefix", []string{"snapshots", "rm", "eb61"}, result(deleted), []string{snapA}, 0,
			"removed snapshot " + snapA + " of train (14.0 MiB)\n", ""},
		{"ambiguous prefix", []string{"snapshot", "rm", "05"}, result(deleted), nil, 1, "",
			`gpuschedctl: snapshot id "05" is ambiguous: it starts ` + snapB + ", " + snapC + "\n"},
		{"unknown prefix", []string{"snapshot", "rm", "ffff"}, result(deleted), nil, 1, "",
			`gpuschedctl: no snapshot id starts with "ffff" (not_found)` + "\n"},
		{"not an id goes to the daemon", []string{"snapshot", "rm", "../x"},
			failure(api.CodeInvalidArgument, `delete_snapshot: id "../x" is not a snapshot id`), []string{"../x"}, 1, "",
			`gpuschedctl: delete_snapshot: id "../x" is not a snapshot id (invalid_argument)` + "\n"},
		{"held", []string{"snapshot", "rm", snapB},
			failure(api.CodeConflict, "snapshot "+snapB+` holds the hibernated process "train": thaw or kill it first`), []string{snapB}, 1, "",
			"gpuschedctl: snapshot " + snapB + ` holds the hibernated process "train": thaw or kill it first (conflict)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{
				api.MethodSnapshots:      answer(result(list)),
				api.MethodDeleteSnapshot: answer(tt.del),
			})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != tt.code || out != tt.stdout || errOut != tt.stderr {
				t.Fatalf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.code, tt.stdout, tt.stderr)
			}
			var ids []string
			for _, req := range d.requests() {
				if req.Method == api.MethodDeleteSnapshot {
					var p api.DeleteSnapshotParams
					if err := json.Unmarshal(req.Params, &p); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, p.ID)
				}
			}
			if !reflect.DeepEqual(ids, tt.wantIDs) {
				t.Errorf("delete_snapshot ids %q, want %q", ids, tt.wantIDs)
			}
		})
	}
}

func TestSet(t *testing.T) {
	tests := []struct {
		args []string
		want string // the params sent
	}{
		{[]string{"set", "train", "--priority", "-5"}, `{"name":"train","priority":-5}`},
		{[]string{"set", "train", "--priority", "0"}, `{"name":"train","priority":0}`},
		{[]string{"set", "train", "--pin"}, `{"name":"train","pin":true}`},
		{[]string{"set", "train", "--no-pin"}, `{"name":"train","pin":false}`},
		{[]string{"set", "train", "--pin=false"}, `{"name":"train","pin":false}`},
		{[]string{"set", "train", "--ttl", "30m", "--idle", "0"}, `{"name":"train","ttl":"30m0s","idle":"0s"}`},
		{[]string{"set", "--idle", "90s", "train", "--priority", "7", "--pin"}, `{"name":"train","priority":7,"pin":true,"idle":"1m30s"}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			p := proc("train")
			p.Policy = api.Policy{Priority: 7, Pin: true, TTL: api.Duration(30 * time.Minute), Idle: api.Duration(90 * time.Minute)}
			d := newFakeDaemon(t, map[string]handler{api.MethodSet: answer(result(p))})
			out, errOut, code := ctl(t, d, tt.args...)
			if want := "train: priority 7, pinned, ttl 30m, idle 1h30m\n"; code != 0 || errOut != "" || out != want {
				t.Fatalf("code %d, stderr %q, stdout %q, want %q", code, errOut, out, want)
			}
			req := d.only(t)
			if req.Method != api.MethodSet || !sameJSON(t, req.Params, []byte(tt.want)) {
				t.Errorf("sent %s %s, want set %s", req.Method, req.Params, tt.want)
			}
		})
	}
}

func TestSetRefused(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodSet: answer(failure(api.CodePermissionDenied, `set "train": pinning needs root`))})
	_, errOut, code := ctl(t, d, "set", "train", "--pin")
	if code != 1 || errOut != "gpuschedctl: set \"train\": pinning needs root (permission_denied)\n" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
}

func TestRunPolicy(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
	_, errOut, code := ctl(t, d, "run", "train", "--priority", "3", "--pin", "--ttl", "10m", "--idle", "1h", "--", "true")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var p api.RunParams
	d.params(t, api.MethodRun, &p)
	if p.Priority != 3 || !p.Pin || time.Duration(p.TTL) != 10*time.Minute || time.Duration(p.Idle) != time.Hour {
		t.Errorf("params %+v", p)
	}

	d = newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
	if _, errOut, code := ctl(t, d, "run", "train", "--", "true"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(d.only(t).Params, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"priority", "pin", "ttl", "idle"} {
		if _, ok := raw[k]; ok {
			t.Errorf("run without policy flags sent %q: %s", k, d.only(t).Params)
		}
	}
}

func TestStatusJobsNone(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(api.Status{GPUs: []api.GPUSummary{}, Leases: 2}))})
	if out, _, code := ctl(t, d, "status"); code != 0 || !strings.Contains(out, "jobs:        none; 2 leases\n") {
		t.Errorf("code %d, stdout:\n%s", code, out)
	}
}

func TestStatusDiskTier(t *testing.T) {
	tests := []struct {
		st   api.Status
		want string
	}{
		{api.Status{CRIU: "4.1.1"}, "disk tier:   criu 4.1.1, snapshots 0 B (budget unlimited), 0 B free on its disk\n"},
		{api.Status{CRIU: "4.1.1", DiskBytes: 3 << 20, DiskFree: 40 << 30, DiskKeepFree: 10 << 30},
			"disk tier:   criu 4.1.1, snapshots 3.0 MiB (budget unlimited), 40.0 GiB free on its disk, 10.0 GiB of it kept free\n"},
		{api.Status{}, "disk tier:   off (no CRIU)\n"},
		{api.Status{DiskBytes: 3 << 20, DiskBudget: 1 << 30}, "disk tier:   off (no CRIU), snapshots 3.0 MiB (budget 1.0 GiB)\n"},
	}
	for _, tt := range tests {
		tt.st.GPUs = []api.GPUSummary{}
		d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(tt.st))})
		out, errOut, code := ctl(t, d, "status")
		if code != 0 || errOut != "" || !strings.Contains(out, tt.want) {
			t.Errorf("code %d, stderr %q, stdout lacks %q:\n%s", code, errOut, tt.want, out)
		}
	}
}

func TestStatusHibernatedProcess(t *testing.T) {
	p := proc("train")
	p.State, p.Tier, p.PID, p.InitPID, p.Snapshot = api.StateHibernated, api.TierDisk, 0, 0, snapB
	p.FrozenAt = time.Now().Add(-2 * time.Minute)
	p.Policy = api.Policy{Priority: -3, TTL: api.Duration(2 * time.Hour)}
	running := proc("eval")
	running.Snapshot = snapA
	for _, tt := range []struct {
		p    api.Process
		want []string
	}{
		{p, []string{"state:     hibernated\n", "tier:      disk\n", "snapshot:  " + snapB + "\nfrozen:    ", " (2m ago)\npolicy:",
			"policy:    priority -3, not pinned, ttl 2h, idle off\n"}},
		{running, []string{"tier:      gpu\n", "snapshot:  " + snapA + " (parent of its next hibernate)\n",
			"policy:    priority 0, not pinned, ttl off, idle off\n"}},
	} {
		d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(tt.p))})
		out, errOut, code := ctl(t, d, "status", tt.p.Name)
		if code != 0 || errOut != "" {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}
}

func TestDiskJSON(t *testing.T) {
	snaps := api.SnapshotsResult{Snapshots: []api.Snapshot{{ID: snapA, GPUs: []string{}}}, Budget: 1 << 30}
	tests := []struct {
		method string
		args   []string
		res    any
	}{
		{api.MethodHibernate, []string{"hibernate", "train"}, hibernatedTrain},
		{api.MethodFork, []string{"fork", "train", "--copies", "1"}, api.ForkResult{Name: "train", Copies: []api.Process{proc("train-1")}}},
		{api.MethodSnapshots, []string{"snapshots"}, snaps},
		{api.MethodDeleteSnapshot, []string{"snapshot", "rm", snapA}, snaps.Snapshots[0]},
		{api.MethodSet, []string{"set", "train", "--ttl", "1h"}, proc("train")},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			want := result(tt.res).Result
			d := newFakeDaemon(t, map[string]handler{tt.method: answer(result(tt.res))})
			out, errOut, code := ctl(t, d, append([]string{"--json"}, tt.args...)...)
			if code != 0 || errOut != "" || strings.Count(out, "\n") != 1 {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			if !sameJSON(t, []byte(out), want) {
				t.Errorf("stdout %s\nwant   %s", out, want)
			}
		})
	}
}

func TestDiskHelp(t *testing.T) {
	out, _, code := ctl(t, nil, "--help")
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	var missing []string
	for _, c := range []string{"hibernate", "fork", "snapshots", "set"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("--help does not list %v:\n%s", missing, out)
	}
}

func TestBytesize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 680 << 10: "680.0 KiB",
		14 << 20: "14.0 MiB", 3 << 29: "1.5 GiB", 2 << 40: "2.0 TiB"} {
		if got := bytesize(n); got != want {
			t.Errorf("bytesize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestOffDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "off", 45 * time.Second: "45s", 30 * time.Minute: "30m",
		90 * time.Minute: "1h30m", 2 * time.Hour: "2h", 90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s"} {
		if got := offDuration(api.Duration(d)); got != want {
			t.Errorf("offDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
