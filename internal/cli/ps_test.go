package cli

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestPSTable(t *testing.T) {
	frozen := proc("frozen")
	frozen.State, frozen.Tier = api.StateFrozen, api.TierHost
	asleep := proc("asleep")
	asleep.State, asleep.Tier, asleep.PID = api.StateHibernated, api.TierDisk, 0
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
		"NAME    STATE       TIER  PID   USER   GPUS  VRAM      AGE/EXIT        CMD\n" +
		"zeta    running     gpu   4242  alice  0,1   12.5 GiB  1h30m           python train.py --tag 'a b'\n" +
		"frozen  frozen      host  4242  alice  0,1   12.5 GiB  1h30m           python train.py --tag 'a b'\n" +
		"asleep  hibernated  disk  0     alice  0,1   12.5 GiB  1h30m           python train.py --tag 'a b'\n" +
		"done    exited      -     0     alice  -     0 MiB     exit 0          python train.py --tag 'a b'\n" +
		"failed  exited      -     0     alice  -     0 MiB     exit 3          python train.py --tag 'a b'\n" +
		"killed  exited      -     0     alice  -     0 MiB     signal SIGKILL  python train.py --tag 'a b'\n" +
		"lost    exited      -     0     alice  -     0 MiB     unknown         python train.py --tag 'a b'\n"
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
