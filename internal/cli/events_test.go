package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

var evTime = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)

// stamp is how an event line shows evTime.
var stamp = evTime.Local().Format("2006-01-02 15:04:05.000")

var someEvents = []any{
	event(api.Event{Seq: 1, Time: evTime, Type: api.EventSubscribed}),
	event(api.Event{Seq: 2, Time: evTime, Type: api.EventProcess, Name: "train", State: api.StateStarting}),
	event(api.Event{Seq: 3, Time: evTime, Type: api.EventProcess, Name: "train", State: api.StateRunning, PrevState: api.StateStarting}),
	event(api.Event{Seq: 4, Time: evTime, Type: api.EventProcess, Name: "train", State: api.StateExited, PrevState: api.StateRunning,
		Process: &api.Process{Name: "train", State: api.StateExited, Exit: &api.Exit{Code: intp(0)}}}),
	event(api.Event{Seq: 5, Time: evTime, Type: api.EventRemoved, Name: "train"}),
}

func TestEventsLines(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodEvents: answer(append(someEvents, result(struct{}{}))...)})
	out, errOut, code := ctl(t, d, "events")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		stamp + "  process   train             starting\n" +
		stamp + "  process   train             starting→running\n" +
		stamp + "  process   train             running→exited (exit 0)\n" +
		stamp + "  removed   train\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestEventsJSON(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodEvents: answer(append(someEvents, result(struct{}{}))...)})
	out, errOut, code := ctl(t, d, "--json", "events")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(someEvents) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(someEvents), out)
	}
	for i, l := range lines {
		want, _ := json.Marshal(someEvents[i].(api.StreamLine).Event)
		if !sameJSON(t, []byte(l), want) {
			t.Errorf("line %d: %s, want %s", i, l, want)
		}
	}
}

// TestEventsStopCleanly cancels a stream the daemon keeps open, as Ctrl-C
// does, and expects a clean exit.
func TestEventsStopCleanly(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodEvents: answer(append(someEvents[:3:3], hold{})...)})
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := newLockedBuffer(), newLockedBuffer()
	done := make(chan int)
	go func() { done <- execute(ctx, []string{"--socket", d.path, "events", "train"}, out, errOut) }()
	out.waitFor("starting→running\n")
	cancel()
	if code := <-done; code != 0 || errOut.String() != "" {
		t.Errorf("code %d, stderr %q; want a clean exit", code, errOut)
	}
	var p api.EventsParams
	d.params(t, api.MethodEvents, &p)
	if p.Name != "train" {
		t.Errorf("name = %q, want train", p.Name)
	}
}
