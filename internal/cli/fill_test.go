package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// filler is alice's filler holding GPU 1 at 0.95 of 80 GiB.
func filler() api.Filler {
	return api.Filler{
		Index: 1, UUID: "GPU-bbbb", User: "alice", UID: 1000, Ratio: 0.95, TargetMiB: 77824,
		HeldMiB: 71680, ReservedMiB: 4096, ChunkMiB: 256, PID: 5151, Session: true,
		CreatedAt: time.Now().Add(-time.Minute),
	}
}

// filling answers fill with f and unfill with it, released.
func filling(f api.Filler) map[string]handler {
	released := f
	released.HeldMiB = 0
	return map[string]handler{
		api.MethodFill:   answer(result(f)),
		api.MethodUnfill: answer(result(released)),
	}
}

// checkFillUnfilled checks that d got fill with params, then the unfill of
// the same GPU, on one connection.
func checkFillUnfilled(t *testing.T, d *fakeDaemon, params, unfill string) {
	t.Helper()
	reqs := d.requests()
	if len(reqs) != 2 || reqs[0].Method != api.MethodFill || reqs[1].Method != api.MethodUnfill {
		t.Fatalf("requests %+v, want fill then unfill", reqs)
	}
	if got := string(reqs[0].Params); got != params {
		t.Errorf("fill params %s\nwant %s", got, params)
	}
	if got := string(reqs[1].Params); got != unfill {
		t.Errorf("unfill params %s, want %s", got, unfill)
	}
	if conns := d.connections(); conns[0] != conns[1] {
		t.Errorf("fill and unfill on connections %v: the filler was not held on one", conns)
	}
}

// ctlInBackground runs gpuschedctl ARGS against d until the test cancels
// its context.
func ctlInBackground(d *fakeDaemon, args ...string) (cancel func(), out, errOut *lockedBuffer, code <-chan int) {
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut = newLockedBuffer(), newLockedBuffer()
	done := make(chan int, 1)
	go func() { done <- execute(ctx, append([]string{"--socket", d.path}, args...), out, errOut) }()
	return cancel, out, errOut, done
}

func TestFillHoldsUntilStopped(t *testing.T) {
	tests := []struct {
		name           string
		args           []string
		params, unfill string
	}{
		{"ratio with --gpu", []string{"fill", "--gpu", "1", "--ratio", "0.95"},
			`{"gpu":1,"ratio":0.95,"session":true}`, `{"gpu":1}`},
		{"size by UUID argument", []string{"fill", "GPU-bbbb", "--mib", "76G"},
			`{"gpu":"GPU-bbbb","mib":77824,"session":true}`, `{"gpu":"GPU-bbbb"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, filling(filler()))
			cancel, out, errOut, code := ctlInBackground(d, tt.args...)
			defer cancel()
			out.waitFor("held until Ctrl-C or SIGTERM\n")
			if reqs := d.requests(); len(reqs) != 1 {
				t.Fatalf("requests %+v while holding the filler, want only fill", reqs)
			}
			cancel()
			if c := <-code; c != 0 || errOut.String() != "" {
				t.Fatalf("code %d, stderr %q; want a clean exit", c, errOut)
			}
			want := "" +
				"filler:    GPU 1 GPU-bbbb\n" +
				"target:    76.0 GiB (0.95) total usage\n" +
				"held:      70.0 GiB\n" +
				"reserved:  4.0 GiB\n" +
				"chunk:     256 MiB\n" +
				"pid:       5151\n" +
				"held until Ctrl-C or SIGTERM\n" +
				"released filler on GPU 1\n"
			if out.String() != want {
				t.Errorf("got\n%s\nwant\n%s", out, want)
			}
			checkFillUnfilled(t, d, tt.params, tt.unfill)
		})
	}
}

func TestFillReleasedElsewhere(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{
		api.MethodFill:   answer(result(filler())),
		api.MethodUnfill: answer(failure(api.CodeNotFound, "unfill: GPU 1 has no filler")),
	})
	cancel, out, errOut, code := ctlInBackground(d, "fill", "1", "--ratio", "0.95")
	defer cancel()
	out.waitFor("held until Ctrl-C or SIGTERM\n")
	cancel()
	if c := <-code; c != 0 || errOut.String() != "" || !strings.HasSuffix(out.String(), "released filler on GPU 1\n") {
		t.Errorf("code %d, stderr %q, stdout %q; a filler that already ended is released", c, errOut, out)
	}
	checkFillUnfilled(t, d, `{"gpu":1,"ratio":0.95,"session":true}`, `{"gpu":1}`)
}

func TestFillHoldJSON(t *testing.T) {
	f := filler()
	d := newFakeDaemon(t, filling(f))
	cancel, out, errOut, code := ctlInBackground(d, "--json", "fill", "--gpu", "1", "--ratio", "0.95")
	defer cancel()
	out.waitFor("\n")
	cancel()
	if c := <-code; c != 0 || errOut.String() != "" {
		t.Fatalf("code %d, stderr %q", c, errOut)
	}
	if want := result(f).Result; strings.Count(out.String(), "\n") != 1 || !sameJSON(t, []byte(out.String()), want) {
		t.Errorf("stdout %s, want only the filler %s", out, want)
	}
	checkFillUnfilled(t, d, `{"gpu":1,"ratio":0.95,"session":true}`, `{"gpu":1}`)
}

func TestFillInterruptedWhileStarting(t *testing.T) {
	arrived := make(chan struct{})
	d := newFakeDaemon(t, map[string]handler{api.MethodFill: func(api.Request) []any {
		close(arrived)
		return []any{hold{}}
	}})
	cancel, out, errOut, code := ctlInBackground(d, "fill", "1", "--ratio", "0.5")
	defer cancel()
	<-arrived
	cancel()
	if c := <-code; c != 1 || out.String() != "" || errOut.String() != "gpuschedctl: interrupted while starting the filler\n" {
		t.Errorf("code %d, stdout %q, stderr %q", c, out, errOut)
	}
}

func TestFillDetach(t *testing.T) {
	f := filler()
	f.Session, f.Ratio, f.ReservedMiB, f.TargetMiB, f.HeldMiB = false, 0, 0, 20480, 20224
	d := newFakeDaemon(t, map[string]handler{api.MethodFill: answer(result(f))})
	out, errOut, code := ctl(t, d, "fill", "--gpu", "1", "--mib", "20G", "--detach")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"filler:  GPU 1 GPU-bbbb\n" +
		"target:  20.0 GiB total usage\n" +
		"held:    19.8 GiB\n" +
		"chunk:   256 MiB\n" +
		"pid:     5151\n" +
		"release it with gpuschedctl unfill 1\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if req := d.only(t); req.Method != api.MethodFill || string(req.Params) != `{"gpu":1,"mib":20480}` {
		t.Errorf("request %s %s, want a persistent fill", req.Method, req.Params)
	}
}

func TestFillRefused(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodFill: answer(failure(api.CodeConflict,
		"fill: GPU 1 is already filled by bob"))})
	out, errOut, code := ctl(t, d, "fill", "1", "--ratio", "0.9")
	if want := "gpuschedctl: fill: GPU 1 is already filled by bob (conflict)\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if req := d.only(t); req.Method != api.MethodFill {
		t.Errorf("request %s, want fill only", req.Method)
	}
}

func TestUnfill(t *testing.T) {
	for _, args := range [][]string{{"unfill", "1"}, {"unfill", "--gpu", "1"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, filling(filler()))
			out, errOut, code := ctl(t, d, args...)
			if code != 0 || errOut != "" || out != "released filler on GPU 1\n" {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			if req := d.only(t); req.Method != api.MethodUnfill || string(req.Params) != `{"gpu":1}` {
				t.Errorf("request %s %s", req.Method, req.Params)
			}
		})
	}
}

func TestUnfillFailures(t *testing.T) {
	tests := []struct {
		code api.Code
		msg  string
	}{
		{api.CodeNotFound, "unfill: GPU 1 has no filler"},
		{api.CodePermissionDenied, "unfill: GPU 1's filler belongs to bob"},
	}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodUnfill: answer(failure(tt.code, tt.msg))})
			out, errOut, code := ctl(t, d, "unfill", "1")
			if want := "gpuschedctl: " + tt.msg + " (" + string(tt.code) + ")\n"; code != 1 || out != "" || errOut != want {
				t.Errorf("code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
			}
		})
	}
}

func TestFillers(t *testing.T) {
	attached := filler()
	attached.Index, attached.UUID, attached.User, attached.Session, attached.Process = 0, "GPU-aaaa", "bob", false, "rollout"
	attached.ReservedMiB, attached.PID = 0, 6262
	persistent := filler()
	persistent.Session, persistent.Ratio, persistent.TargetMiB, persistent.HeldMiB = false, 0, 20480, 0
	persistent.ReservedMiB, persistent.Index, persistent.Error = 0, 2, "cuMemAlloc_v2: out of memory"
	d := newFakeDaemon(t, map[string]handler{api.MethodFillers: answer(result(api.FillersResult{
		Fillers: []api.Filler{attached, filler(), persistent}}))})
	out, errOut, code := ctl(t, d, "fillers")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"GPU  USER   TARGET           HELD      RESERVED  CHUNK    PID   PROCESS  SESSION\n" +
		"0    bob    76.0 GiB (0.95)  70.0 GiB  0 MiB     256 MiB  6262  rollout  no\n" +
		"1    alice  76.0 GiB (0.95)  70.0 GiB  4.0 GiB   256 MiB  5151  -        yes\n" +
		"2    alice  20.0 GiB         0 MiB     0 MiB     256 MiB  5151  -        no\n" +
		"GPU 2: cuMemAlloc_v2: out of memory\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if req := d.only(t); req.Method != api.MethodFillers || req.Params != nil {
		t.Errorf("request %s %s, want fillers without params", req.Method, req.Params)
	}
}

func TestFillJSON(t *testing.T) {
	tests := []struct {
		method string
		args   []string
		res    any
	}{
		{api.MethodFillers, []string{"fillers"}, api.FillersResult{Fillers: []api.Filler{filler()}}},
		{api.MethodFillers, []string{"fillers"}, api.FillersResult{Fillers: []api.Filler{}}},
		{api.MethodFill, []string{"fill", "1", "--ratio", "1", "--detach"}, filler()},
		{api.MethodUnfill, []string{"unfill", "1"}, filler()},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			want := result(tt.res).Result
			d := newFakeDaemon(t, map[string]handler{tt.method: answer(result(tt.res))})
			out, errOut, code := ctl(t, d, append([]string{"--json"}, tt.args...)...)
			if code != 0 || errOut != "" {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			if strings.Count(out, "\n") != 1 || !sameJSON(t, []byte(out), want) {
				t.Errorf("stdout %s\nwant   %s", out, want)
			}
		})
	}
}

func TestRunFilled(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
	if _, errOut, code := ctl(t, d, "run", "train", "--gpu", "1", "--filled", "0.95", "--", "true"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var p api.RunParams
	d.params(t, api.MethodRun, &p)
	if p.Filled != 0.95 || !slices.Equal(p.GPUs, []api.GPURef{{Index: 1}}) {
		t.Errorf("filled %v, gpus %v; want 0.95 on GPU 1", p.Filled, p.GPUs)
	}

	d = newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
	if _, errOut, code := ctl(t, d, "run", "train", "--", "true"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if req := d.only(t); strings.Contains(string(req.Params), "filled") {
		t.Errorf("params %s: filled sent without --filled", req.Params)
	}
}

func TestStatusFillers(t *testing.T) {
	attached := filler()
	attached.Index, attached.User, attached.Session, attached.Process = 0, "bob", false, "rollout"
	persistent := filler()
	persistent.Index, persistent.Session, persistent.Ratio, persistent.TargetMiB, persistent.Error = 2, false, 0, 20480, "helper died"
	st := api.Status{Version: "0.3.0", Protocol: 1, Backend: "sim", Jobs: map[api.JobState]int{},
		Fillers: []api.Filler{attached, filler(), persistent}}
	d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(st))})
	out, errOut, code := ctl(t, d, "status")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"jobs:        none\n" +
		"fillers:     GPU 0 bob, held 70.0 GiB of 76.0 GiB (0.95), attached to rollout\n" +
		"             GPU 1 alice, held 70.0 GiB of 76.0 GiB (0.95), session\n" +
		"             GPU 2 alice, held 70.0 GiB of 20.0 GiB (error: helper died)\n" +
		"checkpoint:  "
	if !strings.Contains(out, want) {
		t.Errorf("got\n%s\nwant it to contain\n%s", out, want)
	}
}

func TestFillUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"fill", "--ratio", "0.5"}, "missing GPU: give its index or UUID, as an argument or with --gpu"},
		{[]string{"fill", "1", "--gpu", "1", "--ratio", "0.5"}, "give the GPU once: as an argument or with --gpu"},
		{[]string{"fill", "1", "2", "--ratio", "0.5"}, "unexpected arguments after 1: 2"},
		{[]string{"fill", "--gpu", "-1", "--ratio", "0.5"}, `bad GPU "-1": GPU index -1 is negative`},
		{[]string{"fill", "1"}, "give exactly one of --ratio and --mib"},
		{[]string{"fill", "1", "--ratio", "0.5", "--mib", "20G"}, "give exactly one of --ratio and --mib"},
		{[]string{"fill", "1", "--ratio", "0"}, "--ratio must be more than 0 and at most 1"},
		{[]string{"fill", "1", "--ratio", "1.01"}, "--ratio must be more than 0 and at most 1"},
		{[]string{"fill", "1", "--ratio", "-0.5"}, "--ratio must be more than 0 and at most 1"},
		{[]string{"fill", "1", "--ratio", "NaN"}, "--ratio must be more than 0 and at most 1"},
		{[]string{"fill", "1", "--ratio", "most"}, `invalid argument "most" for "--ratio"`},
		{[]string{"fill", "1", "--mib", "0"}, "--mib must be more than 0"},
		{[]string{"fill", "1", "--mib", "1.5G"}, `bad --mib: size "1.5G" is not a whole number`},
		{[]string{"fill", "1", "--mib", "20X"}, `bad --mib: size "20X": unknown unit "x"`},
		{[]string{"unfill"}, "missing GPU: give its index or UUID, as an argument or with --gpu"},
		{[]string{"unfill", "1", "2"}, "unexpected arguments after 1: 2"},
		{[]string{"unfill", "0", "--gpu", "0"}, "give the GPU once: as an argument or with --gpu"},
		{[]string{"unfill", "-3"}, "unknown shorthand flag"},
		{[]string{"unfill", "--gpu", "-3"}, `bad GPU "-3": GPU index -3 is negative`},
		{[]string{"fillers", "x"}, "unexpected arguments: x"},
		{[]string{"run", "x", "--filled", "0", "--", "true"}, "--filled must be more than 0 and at most 1"},
		{[]string{"run", "x", "--filled", "1.5", "--", "true"}, "--filled must be more than 0 and at most 1"},
		{[]string{"run", "x", "--filled", "NaN", "--", "true"}, "--filled must be more than 0 and at most 1"},
		{[]string{"run", "x", "--filled", "full", "--", "true"}, `invalid argument "full" for "--filled"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			checkUsageError(t, tt.args, tt.want)
		})
	}
}
