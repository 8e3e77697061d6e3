package daemon

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestEventsCarryTheCommandCut: a subscriber's process events carry a long
// command cut, as listings do (cmd_truncated); wait still answers with the
// whole command, as status does. An event is encoded for every subscriber
// that may see it: 60 subscriptions made each start of a 240 KiB command
// cost the daemon 185 ms more.
func TestEventsCarryTheCommandCut(t *testing.T) {
	h := newHarness(t)
	long := strings.Repeat("a", 3*api.ListCmdBytes)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	subscribed := make(chan struct{})
	events := make(chan api.Event, 64)
	go h.client().Events(ctx, api.EventsParams{Name: "long"}, func(e *api.Event) error {
		if e.Type == api.EventSubscribed {
			close(subscribed)
		} else {
			events <- *e
		}
		return nil
	})
	select {
	case <-subscribed:
	case <-time.After(time.Minute):
		t.Fatal("never subscribed")
	}
	h.run("long", "sh", "-c", "exit 0", long)
	p := h.waitExit("long")
	if !slices.Equal(p.Cmd, []string{"sh", "-c", "exit 0", long}) || p.CmdTruncated {
		t.Fatalf("wait answered with a command of %d arguments, truncated %v; want it whole", len(p.Cmd), p.CmdTruncated)
	}
	select {
	case e := <-events:
		b, _ := json.Marshal(e.Process.Cmd)
		if !e.Process.CmdTruncated || len(b) > api.ListCmdBytes {
			t.Fatalf("a %s event carried %d bytes of command, truncated %v; want at most %d", e.Type, len(b), e.Process.CmdTruncated, api.ListCmdBytes)
		}
	case <-time.After(time.Minute):
		t.Fatal("no event")
	}
}

// TestListedEventLeavesTheRecordWhole: cutting an event's command leaves
// the process and job it was made from as they were.
func TestListedEventLeavesTheRecordWhole(t *testing.T) {
	cmd := []string{"run", strings.Repeat("b", 2*api.ListCmdBytes), "tail"}
	p := api.Process{Name: "p", Cmd: slices.Clone(cmd)}
	j := api.Job{Name: "j", Cmd: slices.Clone(cmd)}
	for _, e := range []api.Event{{Type: api.EventProcess, Process: &p}, {Type: api.EventJob, Job: &j}} {
		out := listedEvent(e)
		if (out.Process != nil && !out.Process.CmdTruncated) || (out.Job != nil && !out.Job.CmdTruncated) {
			t.Fatalf("%s event not cut", e.Type)
		}
	}
	if !slices.Equal(p.Cmd, cmd) || !slices.Equal(j.Cmd, cmd) || p.CmdTruncated || j.CmdTruncated {
		t.Fatal("cutting an event's command changed its process or job")
	}
}
