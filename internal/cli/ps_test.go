package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestPSTable(t *testing.T) {
	frozen := proc("frozen")
	frozen.State, frozen.Tier, frozen.VRAMMiB, frozen.HostMiB = api.StateFrozen, api.TierHost, 0, 8192
	asleep := proc("asleep")
	asleep.State, asleep.Tier, asleep.PID, asleep.VRAMMiB, asleep.DiskMiB = api.StateHibernated, api.TierDisk, 0, 0, 12000
	procs := []api.Process{
		proc("zeta"), // the daemon's order is kept, whatever it is
		frozen,
		asleep,
		exited("done", api.Exit{Code: intp(0)}),
		exited("failed", api.Exit{Code: intp(3)}),
		exited("killed", api.Exit{Signal: "SIGKILL"}),
		exited("lost", api.Exit{Unknown: true, Reason: "daemon restarted"}),
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: procs}))})
	out, errOut, code := ctl(t, d, "ps", "--user", "alice")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"NAME    STATE       TIER  PID   USER   GPUS  VRAM        AGE/EXIT        CMD\n" +
		"zeta    running     gpu   4242  alice  0,1   12.5 GiB    1h30m           python train.py --tag 'a b'\n" +
		"frozen  frozen      host  4242  alice  0,1   (8.0 GiB)   1h30m           python train.py --tag 'a b'\n" +
		"asleep  hibernated  disk  0     alice  0,1   (11.7 GiB)  1h30m           python train.py --tag 'a b'\n" +
		"done    exited      -     0     alice  -     0 MiB       exit 0          python train.py --tag 'a b'\n" +
		"failed  exited      -     0     alice  -     0 MiB       exit 3          python train.py --tag 'a b'\n" +
		"killed  exited      -     0     alice  -     0 MiB       signal SIGKILL  python train.py --tag 'a b'\n" +
		"lost    exited      -     0     alice  -     0 MiB       unknown         python train.py --tag 'a b'\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	var p api.PSParams
	d.params(t, api.MethodPS, &p)
	if p.User != "alice" {
		t.Errorf("user = %q, want alice", p.User)
	}
}

func TestPSEmpty(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{}}))})
	out, _, code := ctl(t, d, "ps")
	if want := "NAME  STATE  TIER  PID  USER  GPUS  VRAM  AGE/EXIT  CMD\n"; code != 0 || out != want {
		t.Errorf("code %d, stdout %q, want %q", code, out, want)
	}
}

// TestPSLiveByDefault: ps lists the live processes, as docker ps does;
// -a/--all lists the exited ones too, --state exactly those states.
func TestPSLiveByDefault(t *testing.T) {
	live := []api.State{api.StateStarting, api.StateRunning, api.StateFreezing, api.StateFrozen, api.StateThawing, api.StateLocked,
		api.StateFailed, api.StateHibernating, api.StateHibernated, api.StateRestoring}
	for _, tt := range []struct {
		args []string
		want []api.State
	}{
		{[]string{"ps"}, live},
		{[]string{"ps", "-a"}, nil},
		{[]string{"ps", "--all", "--user", "alice"}, nil},
		{[]string{"ps", "--state", "exited"}, []api.State{api.StateExited}},
	} {
		d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{}}))})
		if _, errOut, code := ctl(t, d, tt.args...); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", tt.args, code, errOut)
		}
		var p api.PSParams
		d.params(t, api.MethodPS, &p)
		if !slices.Equal(p.States, tt.want) {
			t.Errorf("%v asks for states %v, want %v", tt.args, p.States, tt.want)
		}
	}
	checkUsageError(t, []string{"ps", "-a", "--state", "exited"}, "give --all or --state, not both")
}

// TestPSCutCommands: a command the listing cut (cmd_truncated) ends in
// "…"; --no-trunc asks for each cut one by name (status) and shows it
// whole, leaving the others, and a process gone meanwhile, as listed.
func TestPSCutCommands(t *testing.T) {
	cut, gone, short := proc("cut"), proc("gone"), proc("short")
	cut.Cmd, cut.CmdTruncated = []string{"python", "-c", "pri"}, true
	gone.Cmd, gone.CmdTruncated = []string{"sleep"}, true
	whole := proc("cut")
	whole.Cmd = []string{"python", "-c", "print(1)"}
	d := newFakeDaemon(t, map[string]handler{
		api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{cut, gone, short}})),
		api.MethodStatus: func(req api.Request) []any {
			var p api.StatusParams
			if err := json.Unmarshal(req.Params, &p); err != nil || p.Name != "cut" {
				return []any{failure(api.CodeNotFound, "process not found")}
			}
			return []any{result(whole)}
		},
	})
	out, _, code := ctl(t, d, "ps")
	if code != 0 || !strings.Contains(out, "python -c pri…\n") || !strings.Contains(out, "sleep…\n") || !strings.Contains(out, "'a b'\n") {
		t.Errorf("ps: code %d, stdout\n%s\nwant the cut commands ending in …", code, out)
	}
	if n := len(d.requests()); n != 1 {
		t.Errorf("ps without --no-trunc sent %d requests, want 1", n)
	}
	out, errOut, code := ctl(t, d, "ps", "--no-trunc")
	if code != 0 || !strings.Contains(out, "python -c 'print(1)'\n") || !strings.Contains(out, "sleep…\n") || strings.Contains(out, "pri…") {
		t.Errorf("ps --no-trunc: code %d, stderr %q, stdout\n%s\nwant cut whole, gone still cut", code, errOut, out)
	}
	var asked []string
	for _, r := range d.requests()[1:] {
		if r.Method == api.MethodStatus {
			var p api.StatusParams
			json.Unmarshal(r.Params, &p)
			asked = append(asked, p.Name)
		}
	}
	if !slices.Equal(asked, []string{"cut", "gone"}) {
		t.Errorf("ps --no-trunc asked status of %v, want cut and gone", asked)
	}
	out, _, code = ctl(t, d, "--json", "ps", "--no-trunc")
	var res api.PSResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Processes) != 3 ||
		!slices.Equal(res.Processes[0].Cmd, whole.Cmd) || res.Processes[0].CmdTruncated || !res.Processes[1].CmdTruncated {
		t.Errorf("--json ps --no-trunc: code %d, %v, %s", code, err, out)
	}
}
