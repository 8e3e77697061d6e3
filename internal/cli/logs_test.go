package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestLogsTail(t *testing.T) {
	tests := []struct {
		args  []string
		lines int
	}{
		{[]string{"logs", "train"}, 100},
		{[]string{"logs", "train", "-n", "2"}, 2},
		{[]string{"logs", "train", "--lines=-1"}, -1},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := api.LogsResult{Name: "train", Lines: []string{"epoch 1", "epoch 2"}}
			d := newFakeDaemon(t, map[string]handler{api.MethodLogs: answer(result(res))})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" || out != "epoch 1\nepoch 2\n" {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			var p api.LogsParams
			d.params(t, api.MethodLogs, &p)
			if p.Name != "train" || p.Follow || p.Lines == nil || *p.Lines != tt.lines {
				t.Errorf("params %+v, want name train, lines %d, no follow", p, tt.lines)
			}
		})
	}
}

// TestLogsTruncated: a reply cut at the daemon's cap prints its lines and
// says on stderr that older ones were left out.
func TestLogsTruncated(t *testing.T) {
	res := api.LogsResult{Name: "train", Lines: []string{"epoch 9"}, Truncated: true}
	d := newFakeDaemon(t, map[string]handler{api.MethodLogs: answer(result(res))})
	out, errOut, code := ctl(t, d, "logs", "train", "-n", "-1")
	if code != 0 || out != "epoch 9\n" || !strings.Contains(errOut, "older lines of train left out") {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
}

// followed streams two log lines around a state change, then ends as the
// process exits.
var followed = answer(
	event(api.Event{Type: api.EventLog, Name: "train", Line: "loss 0.9"}),
	event(api.Event{Type: api.EventProcess, Name: "train", State: api.StateExited, PrevState: api.StateRunning}),
	event(api.Event{Type: api.EventLog, Name: "train", Line: "loss 0.1"}),
	result(api.LogsResult{Name: "train", Lines: []string{}}),
)

func TestLogsFollowPrintsStreamedLines(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodLogs: followed})
	out, errOut, code := ctl(t, d, "logs", "-f", "-n", "0", "train")
	if code != 0 || errOut != "" || out != "loss 0.9\nloss 0.1\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.LogsParams
	d.params(t, api.MethodLogs, &p)
	if !p.Follow || p.Lines == nil || *p.Lines != 0 {
		t.Errorf("params %+v, want follow with 0 lines", p)
	}
}

func TestLogsFollowJSON(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodLogs: followed})
	out, errOut, code := ctl(t, d, "--json", "logs", "-f", "train")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var got []string
	for l := range strings.Lines(out) {
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if e.Type != api.EventLog {
			t.Errorf("event %+v is not a log event", e)
		}
		got = append(got, e.Line)
	}
	if strings.Join(got, "|") != "loss 0.9|loss 0.1" {
		t.Errorf("lines %q, want loss 0.9, loss 0.1", got)
	}
}
