package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// leasing answers acquire with l and release with it too.
func leasing(l api.Lease) map[string]handler {
	return map[string]handler{
		api.MethodAcquire: answer(result(l)),
		api.MethodRelease: answer(result(l)),
	}
}

// checkAcquireReleased checks that d got acquire with params, then the
// release of L1, on one connection.
func checkAcquireReleased(t *testing.T, d *fakeDaemon, params string) {
	t.Helper()
	reqs := d.requests()
	if len(reqs) != 2 || reqs[0].Method != api.MethodAcquire || reqs[1].Method != api.MethodRelease {
		t.Fatalf("requests %+v, want acquire then release", reqs)
	}
	if got := string(reqs[0].Params); got != params {
		t.Errorf("acquire params %s\nwant %s", got, params)
	}
	if got := string(reqs[1].Params); got != `{"id":"L1"}` {
		t.Errorf("release params %s, want L1", got)
	}
	if conns := d.connections(); conns[0] != conns[1] {
		t.Errorf("acquire and release on connections %v: the lease was not held on one", conns)
	}
}

func TestAcquireRunsACommand(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "7")
	tests := []struct {
		name    string
		args    []string
		stdin   string
		out     string
		code    int
		params  string
		errLine string
	}{
		{"its exit status", []string{"--gpus", "2", "--min-free", "40G", "--max-util", "10", "--max-power", "300.5",
			"--gpu-ids", "0,GPU-bbbb", "--timeout", "30m", "--priority", "3",
			"--", "/bin/sh", "-c", `echo "$CUDA_VISIBLE_DEVICES $GPUSCHED_LEASE"; exit 3`},
			"", "GPU-aaaa,GPU-bbbb L1\n", 3,
			`{"gpus":2,"min_free":40960,"max_util":10,"max_power":300.5,"gpu_ids":[0,"GPU-bbbb"],"timeout":"30m0s","priority":3}`, ""},
		{"success", []string{"--", "true"}, "", "", 0, `{"gpus":1}`, ""},
		{"a signal is 128+N", []string{"--", "/bin/sh", "-c", "kill -TERM $$"}, "", "", 128 + 15, `{"gpus":1}`, ""},
		{"standard input", []string{"--", "cat"}, "to the command\n", "to the command\n", 0, `{"gpus":1}`, ""},
		{"a command that cannot start", []string{"--", "/nonexistent/cmd"}, "", "", 1, `{"gpus":1}`,
			"gpuschedctl: fork/exec /nonexistent/cmd: no such file or directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withStdin(t, tt.stdin)
			d := newFakeDaemon(t, leasing(lease("L1")))
			out, errOut, code := ctl(t, d, append([]string{"acquire"}, tt.args...)...)
			if code != tt.code || out != tt.out || errOut != tt.errLine {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.code, tt.out, tt.errLine)
			}
			checkAcquireReleased(t, d, tt.params)
		})
	}
}

// acquireInBackground runs gpuschedctl acquire ARGS against d until the
// test cancels its context.
func acquireInBackground(d *fakeDaemon, args ...string) (cancel func(), out, errOut *lockedBuffer, code <-chan int) {
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut = newLockedBuffer(), newLockedBuffer()
	done := make(chan int, 1)
	go func() { done <- execute(ctx, append([]string{"--socket", d.path, "acquire"}, args...), out, errOut) }()
	return cancel, out, errOut, done
}

func TestAcquireHoldsUntilStopped(t *testing.T) {
	d := newFakeDaemon(t, leasing(lease("L1")))
	cancel, out, errOut, code := acquireInBackground(d, "--min-free", "40960")
	defer cancel()
	out.waitFor("held until Ctrl-C or SIGTERM\n")
	if reqs := d.requests(); len(reqs) != 1 {
		t.Fatalf("requests %+v while holding the lease, want only acquire", reqs)
	}
	cancel()
	if c := <-code; c != 0 || errOut.String() != "" {
		t.Fatalf("code %d, stderr %q; want a clean exit", c, errOut)
	}
	want := "" +
		"lease:                 L1\n" +
		"gpus:                  0 GPU-aaaa\n" +
		"                       1 GPU-bbbb\n" +
		"memory:                40.0 GiB per GPU\n" +
		"CUDA_VISIBLE_DEVICES:  GPU-aaaa,GPU-bbbb\n" +
		"held until Ctrl-C or SIGTERM\n" +
		"released lease L1\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	checkAcquireReleased(t, d, `{"gpus":1,"min_free":40960}`)
}

// TestAcquireShowsExpiry: a lease the daemon will release by itself says
// when.
func TestAcquireShowsExpiry(t *testing.T) {
	l := lease("L1")
	l.ExpiresAt = time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	d := newFakeDaemon(t, leasing(l))
	cancel, out, _, code := acquireInBackground(d)
	defer cancel()
	out.waitFor("held until Ctrl-C or SIGTERM\n")
	cancel()
	<-code
	if want := "expires:               2026-11-26T18:00:00Z (the daemon releases it then: --user-lease-max-hold)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("got\n%s\nwant a line %q", out, want)
	}
}

func TestAcquireLeaseReleasedElsewhere(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{
		api.MethodAcquire: answer(result(lease("L1"))),
		api.MethodRelease: answer(failure(api.CodeNotFound, `lease "L1" not found`)),
	})
	cancel, out, errOut, code := acquireInBackground(d)
	defer cancel()
	out.waitFor("held until Ctrl-C or SIGTERM\n")
	cancel()
	if c := <-code; c != 0 || errOut.String() != "" || !strings.HasSuffix(out.String(), "released lease L1\n") {
		t.Errorf("code %d, stderr %q, stdout %q; a lease that already ended is released", c, errOut, out)
	}
	checkAcquireReleased(t, d, `{"gpus":1}`)
}

func TestAcquireHoldJSON(t *testing.T) {
	l := lease("L1")
	d := newFakeDaemon(t, leasing(l))
	cancel, out, errOut, code := acquireInBackground(d, "--json")
	defer cancel()
	out.waitFor("\n")
	cancel()
	if c := <-code; c != 0 || errOut.String() != "" {
		t.Fatalf("code %d, stderr %q", c, errOut)
	}
	if want := result(l).Result; strings.Count(out.String(), "\n") != 1 || !sameJSON(t, []byte(out.String()), want) {
		t.Errorf("stdout %s, want only the lease %s", out, want)
	}
	checkAcquireReleased(t, d, `{"gpus":1}`)
}

func TestAcquireStoppedWhileTheCommandRuns(t *testing.T) {
	d := newFakeDaemon(t, leasing(lease("L1")))
	cancel, out, _, code := acquireInBackground(d, "--", "/bin/sh", "-c", "echo started; exec sleep 60")
	defer cancel()
	out.waitFor("started\n")
	cancel()
	if c := <-code; c != 128+15 {
		t.Errorf("code %d, want 143: the command ended by SIGTERM", c)
	}
	checkAcquireReleased(t, d, `{"gpus":1}`)
}

func TestAcquireInterruptedWhileWaiting(t *testing.T) {
	arrived := make(chan struct{})
	d := newFakeDaemon(t, map[string]handler{api.MethodAcquire: func(api.Request) []any {
		close(arrived)
		return []any{hold{}}
	}})
	cancel, out, errOut, code := acquireInBackground(d, "--timeout", "1h", "--", "true")
	defer cancel()
	<-arrived
	cancel()
	if c := <-code; c != 1 || out.String() != "" || errOut.String() != "gpuschedctl: interrupted while waiting for a lease\n" {
		t.Errorf("code %d, stdout %q, stderr %q", c, out, errOut)
	}
}

func TestAcquireRefused(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodAcquire: answer(failure(api.CodeResourceExhausted,
		"acquire 2 GPUs: no GPU has 40.0 GiB free (pass a timeout to wait)"))})
	out, errOut, code := ctl(t, d, "acquire", "--gpus", "2", "--", "true")
	want := "gpuschedctl: acquire 2 GPUs: no GPU has 40.0 GiB free (pass a timeout to wait) (resource_exhausted)\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if reqs := d.requests(); len(reqs) != 1 {
		t.Errorf("requests %+v, want the acquire only", reqs)
	}
}

func TestLeases(t *testing.T) {
	whole := lease("L2")
	whole.User, whole.MiB, whole.GPUs = "bob", 0, []api.LeaseGPU{{Index: 2, UUID: "GPU-cccc"}}
	whole.AcquiredAt = whole.AcquiredAt.Add(-115 * 60e9)
	d := newFakeDaemon(t, map[string]handler{api.MethodLeases: answer(result(api.LeasesResult{Leases: []api.Lease{lease("L1"), whole}}))})
	out, errOut, code := ctl(t, d, "leases")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"ID  USER   GPUS  MIB    AGE\n" +
		"L1  alice  0,1   40960  5m\n" +
		"L2  bob    2     whole  2h\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if req := d.only(t); req.Method != api.MethodLeases || req.Params != nil {
		t.Errorf("request %s %s, want leases without params", req.Method, req.Params)
	}
}

func TestRelease(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodRelease: answer(result(lease("L1")))})
	out, errOut, code := ctl(t, d, "release", "L1")
	if code != 0 || errOut != "" || out != "released lease L1 (GPUs 0,1)\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	if req := d.only(t); req.Method != api.MethodRelease || string(req.Params) != `{"id":"L1"}` {
		t.Errorf("request %s %s", req.Method, req.Params)
	}
	if !slices.Equal(d.connections(), []int{1}) {
		t.Errorf("connections %v", d.connections())
	}
}
