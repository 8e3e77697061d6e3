package cli

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestWaitExitStatus(t *testing.T) {
	tests := []struct {
		name string
		resp api.Response
		out  string
		err  string
		code int
	}{
		{"exit 0", result(exited("job", api.Exit{Code: intp(0)})), "job: exited, exit 0\n", "", 0},
		{"exit 3", result(exited("job", api.Exit{Code: intp(3)})), "job: exited, exit 3\n", "", 1},
		{"signal", result(exited("job", api.Exit{Signal: "SIGKILL"})), "job: exited, signal SIGKILL\n", "", 1},
		{"unknown", result(exited("job", api.Exit{Unknown: true})), "job: exited, unknown\n", "", 1},
		{"timeout", failure(api.CodeTimeout, `process "job" still running after 1m30s`), "",
			`gpuschedctl: process "job" still running after 1m30s (timeout)` + "\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodWait: answer(
				event(api.Event{Type: api.EventProcess, Name: "job", State: api.StateRunning}),
				tt.resp,
			)})
			out, errOut, code := ctl(t, d, "wait", "job", "--timeout", "90s")
			if code != tt.code || out != tt.out || errOut != tt.err {
				t.Errorf("code %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errOut, tt.code, tt.out, tt.err)
			}
			var p api.WaitParams
			d.params(t, api.MethodWait, &p)
			if p.Name != "job" || time.Duration(p.Timeout) != 90*time.Second {
				t.Errorf("params %+v, want job, 90s", p)
			}
		})
	}
}

func TestWaitJSONKeepsTheExitStatus(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodWait: answer(result(exited("job", api.Exit{Code: intp(2)})))})
	out, _, code := ctl(t, d, "--json", "wait", "job")
	if code != 1 || out == "" {
		t.Errorf("code %d, stdout %q; want 1 and the process", code, out)
	}
}
