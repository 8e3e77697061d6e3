package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestFailingPolicyBacksOff: a process frozen past its TTL whose hibernate
// keeps failing (CRIU runs out of room in a 16 MiB tmpfs) is not dumped
// again on every policy tick. Over 40 ticks (10 s) the policy tries at
// 0, 1, 3 and 7 s, says why once (one warning log line, one event with a
// warning, the process's note), and the process stays frozen and thaws.
// The ticks are driven with their times rather than waited for: the TTL
// of an hour keeps the daemon's own policy loop away.
func TestFailingPolicyBacksOff(t *testing.T) {
	criu := testutil.CRIU(t)
	snapDir := testutil.Tmpfs(t, "policy-backoff", "16m")
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) {
		c.CRIU = criu
		c.SnapshotDir, c.DiskKeepFree = snapDir, 0 // the dump itself runs out of room
	})
	core, logs := observer.New(zap.InfoLevel)
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.begin()
	c := h.client()
	h.memJob("job", 64, 32)
	ttl := api.Duration(time.Hour)
	if _, err := c.Set(ctxT(t), api.SetParams{Name: "job", TTL: &ttl}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	events := h.collectEvents("job")

	rec, _ := h.record("job")
	due := rec.Checkpoint.FrozenAt.Add(time.Duration(ttl))
	st := newPolicyState()
	for i := range 40 {
		h.d.applyPolicies(ctxT(t), due.Add(time.Duration(i)*policyTick), st)
		st.wait()
	}
	p := h.proc("job")
	if p.State != api.StateFrozen || !strings.Contains(p.Note, "ttl policy: hibernate failed") {
		t.Errorf("after the failed hibernates: state %s, note %q", p.State, p.Note)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	var dumps, warnings int
	for _, e := range events.until(api.StateRunning) {
		if e.PrevState == api.StateFrozen && e.State == api.StateHibernating {
			dumps++
		}
		if e.Warning != "" {
			warnings++
			if !strings.Contains(e.Warning, "ttl policy: hibernate failed") || e.Process == nil || e.Process.Note != e.Warning {
				t.Errorf("warning event: %q, process %+v", e.Warning, e.Process)
			}
		}
	}
	if dumps != 4 || warnings != 1 {
		t.Errorf("over 40 ticks: %d hibernates tried and %d warning events; want 4 (at 0, 1, 3, 7 s) and 1", dumps, warnings)
	}
	said := logs.FilterMessage("policy action failed; retrying with backoff").Len()
	loud := logs.FilterLevelExact(zap.WarnLevel).FilterMessage("hibernate failed").Len()
	if said != 1 || loud != 0 {
		t.Errorf("log: %d policy warnings, %d hibernate warnings; want 1 and 0", said, loud)
	}
}

// eventLog collects one process's events from the moment it returns.
type eventLog struct {
	t  testing.TB
	ch chan api.Event
}

// collectEvents subscribes to name's events and returns once subscribed.
func (h *harness) collectEvents(name string) *eventLog {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &eventLog{t: h.t, ch: make(chan api.Event, 1024)}
	subscribed := make(chan struct{})
	c := h.client()
	go func() {
		_ = c.Events(ctx, api.EventsParams{Name: name}, func(e *api.Event) error {
			if e.Type == api.EventSubscribed {
				close(subscribed)
				return nil
			}
			l.ch <- *e
			return nil
		})
		close(l.ch)
	}()
	h.t.Cleanup(cancel)
	select {
	case <-subscribed:
	case <-time.After(30 * time.Second):
		h.t.Fatalf("events of %s: not subscribed", name)
	}
	return l
}

// until returns the events up to and including the first that reaches
// state.
func (l *eventLog) until(state api.State) []api.Event {
	l.t.Helper()
	var out []api.Event
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-l.ch:
			if !ok {
				l.t.Fatalf("event stream ended before %s", state)
			}
			out = append(out, e)
			if e.State == state && e.Warning == "" {
				return out
			}
		case <-timeout:
			l.t.Fatalf("no %s event in 60s; got %d events", state, len(out))
		}
	}
}

// TestPolicyActionsRunBesideOtherUsers: a user's policy action that takes
// long (a ttl hibernate of a large tree) holds back only that user's next
// action, not another user's, which runs meanwhile: the loop ran them in
// turn, and one user's 14 s dump held another's idle freeze for as long
// (a red-team pass).
func TestPolicyActionsRunBesideOtherUsers(t *testing.T) {
	d := &Daemon{log: zaptest.NewLogger(t)}
	st := newPolicyState()
	now := time.Now()
	rec := func(id string, uid uint32) proctable.Record {
		return proctable.Record{ID: id, Name: id, Owner: proctable.Owner{UID: uid}}
	}
	release := make(chan struct{})
	if !d.tryPolicy(st, now, rec("a1", 1001), actionTTL, func() (bool, error) { <-release; return true, nil }) {
		t.Fatal("the first user's action did not start")
	}
	if d.tryPolicy(st, now, rec("a2", 1001), actionIdle, func() (bool, error) { return true, nil }) {
		t.Fatal("the same user's second action started beside the first")
	}
	ran := make(chan struct{})
	if !d.tryPolicy(st, now, rec("b1", 1002), actionIdle, func() (bool, error) { close(ran); return true, nil }) {
		t.Fatal("another user's action waited for the first user's")
	}
	<-ran // while the first user's action still runs
	close(release)
	st.wait()
	if !d.tryPolicy(st, now, rec("a2", 1001), actionIdle, func() (bool, error) { return true, nil }) {
		t.Fatal("the first user's next action did not start once the first ended")
	}
	st.wait()
}
