package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestRmSeveral(t *testing.T) {
	res := api.RmResult{
		Removed: []api.Process{exited("a", api.Exit{Code: intp(0)}), exited("c", api.Exit{Code: intp(1)})},
		Failed:  []api.RmFailure{{Name: "b", Error: `process "b" is running; kill it before rm`, Code: api.CodeConflict}},
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodRm: answer(result(res))})
	out, errOut, code := ctl(t, d, "rm", "a", "b", "c")
	if code != exitFailure || out != "removed a\nremoved c\n" ||
		errOut != `gpuschedctl: rm b: process "b" is running; kill it before rm (conflict)`+"\n" {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, want := string(d.only(t).Params), `{"names":["a","b","c"]}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
}

func TestRmExited(t *testing.T) {
	res := api.RmResult{Removed: []api.Process{exited("a", api.Exit{Code: intp(0)})}, Failed: []api.RmFailure{}}
	d := newFakeDaemon(t, map[string]handler{api.MethodRm: answer(result(res))})
	out, errOut, code := ctl(t, d, "rm", "--exited", "--user", "alice")
	if code != 0 || out != "removed a\n" || errOut != "" {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, want := string(d.only(t).Params), `{"exited":true,"user":"alice"}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
}

func TestRmUsage(t *testing.T) {
	for _, args := range [][]string{{"rm"}, {"rm", "--exited", "a"}, {"rm", "--user", "alice", "a"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, nil)
			_, _, code := ctl(t, d, args...)
			if code != exitUsage || len(d.requests()) != 0 {
				t.Errorf("code %d, %d requests; want a usage error and none", code, len(d.requests()))
			}
		})
	}
}

func TestPSStates(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{}}))})
	if _, errOut, code := ctl(t, d, "ps", "--state", "exited,frozen"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if got, want := string(d.only(t).Params), `{"states":["exited","frozen"]}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
	_, errOut, code := ctl(t, d, "ps", "--state", "exited,zombie")
	if code != exitUsage || !strings.Contains(errOut, `bad --state "zombie"`) {
		t.Errorf("code %d, stderr %q; want a usage error naming zombie", code, errOut)
	}
}
