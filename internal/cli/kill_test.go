package cli

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestKillRequest(t *testing.T) {
	tests := []struct {
		args   []string
		signal string
		grace  time.Duration
	}{
		{[]string{"kill", "job"}, "", 0},
		{[]string{"kill", "job", "--grace", "30s"}, "", 30 * time.Second},
		{[]string{"kill", "job", "--signal", "term"}, "SIGTERM", 0},
		{[]string{"kill", "job", "--signal", "SIGUSR1"}, "SIGUSR1", 0},
		{[]string{"kill", "job", "--signal", "9"}, "9", 0},
	}
	for _, tt := range tests {
		t.Run(tt.signal+tt.grace.String(), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodKill: answer(result(exited("job", api.Exit{Signal: "SIGTERM"})))})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" || out != "job: exited, signal SIGTERM\n" {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			var p api.KillParams
			d.params(t, api.MethodKill, &p)
			if p.Name != "job" || p.Signal != tt.signal || time.Duration(p.Grace) != tt.grace {
				t.Errorf("params %+v, want signal %q grace %v", p, tt.signal, tt.grace)
			}
		})
	}
}

func TestRm(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodRm: answer(result(exited("job", api.Exit{Code: intp(0)})))})
	out, errOut, code := ctl(t, d, "rm", "job")
	if code != 0 || errOut != "" || out != "removed job\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.NameParams
	d.params(t, api.MethodRm, &p)
	if p.Name != "job" {
		t.Errorf("name = %q, want job", p.Name)
	}
}
