package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpusched/gpusched/internal/backoff"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// policyTick is how often TTL and idle policies are checked.
const policyTick = 250 * time.Millisecond

// A policy action that fails is tried again after policyRetryMin, then
// after twice as long each time, up to policyRetryMax.
const (
	policyRetryMin = time.Second
	policyRetryMax = 10 * time.Minute
)

// The policy actions, as keys of their failure streaks.
const (
	actionTTL  = "ttl"  // hibernate a process frozen past its TTL
	actionIdle = "idle" // freeze a process idle past its Idle time
)

// policyState is what the policy loop keeps between ticks: since when each
// running process has been idle, the failure streaks of its actions, and
// whose actions run. Each user's actions run one at a time, beside other
// users': one user's ttl hibernate of a tree of 800 processes held every
// other user's idle freeze for 14 s while the loop ran actions in turn (a
// red-team pass, 2026-11-29).
type policyState struct {
	idle idleTracker // the loop's own

	mu      sync.Mutex
	retry   *backoff.Set[policyKey, policySubject]
	running map[uint32]bool // owners with an action running
	actions sync.WaitGroup
}

// policyKey is one action on one process record.
type policyKey struct {
	id     string
	action string
}

// policySubject is what a failed action acted on: a streak ends when the
// record's state, policy or freeze changes.
type policySubject struct {
	state    api.State
	policy   api.Policy
	frozenAt time.Time
}

func newPolicyState() *policyState {
	return &policyState{idle: idleTracker{}, retry: backoff.New[policyKey, policySubject](policyRetryMin, policyRetryMax), running: map[uint32]bool{}}
}

// wait returns once no action runs.
func (st *policyState) wait() { st.actions.Wait() }

func subjectOf(r proctable.Record) policySubject {
	s := policySubject{state: r.State, policy: r.Policy}
	if r.Checkpoint != nil {
		s.frozenAt = r.Checkpoint.FrozenAt
	}
	return s
}

// runPolicies applies the time-based policies until ctx ends: a frozen
// process past its TTL is hibernated, a running one whose GPUs have been
// idle for its Idle time is frozen.
func (d *Daemon) runPolicies(ctx context.Context) {
	t := time.NewTicker(policyTick)
	defer t.Stop()
	st := newPolicyState()
	defer st.wait()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.applyPolicies(ctx, now, st)
		}
	}
}

// applyPolicies is one tick of the policy loop at now: it starts the
// actions due (tryPolicy) and returns. An action that failed waits out its
// backoff, so that one failing process costs a try now and then, not one
// per tick.
func (d *Daemon) applyPolicies(ctx context.Context, now time.Time, st *policyState) {
	view := d.gpuView()
	subjects := map[string]policySubject{}
	for _, p := range d.table.View().Records {
		r := *p
		subjects[r.ID] = subjectOf(r)
		switch {
		case r.State == api.StateFrozen && r.Policy.TTL > 0 && d.criu != nil && !r.Policy.Pin &&
			now.Sub(r.Checkpoint.FrozenAt) >= time.Duration(r.Policy.TTL):
			d.tryPolicy(st, now, r, actionTTL, func() (bool, error) {
				return d.evict(ctx, r, hibernateOpts{why: fmt.Sprintf("hibernated after %v frozen (ttl)", time.Duration(r.Policy.TTL)), quiet: true})
			})
		case r.State == api.StateRunning && r.Policy.Idle > 0 && !r.MPSClient(): // MPS clients cannot be frozen
			if since := st.idle.observe(r, view, now); now.Sub(since) >= time.Duration(r.Policy.Idle) {
				if d.tryPolicy(st, now, r, actionIdle, func() (bool, error) { return d.idleFreeze(ctx, r, now.Sub(since)) }) {
					delete(st.idle, r.ID)
				}
			}
		}
	}
	for id := range st.idle {
		if _, ok := subjects[id]; !ok {
			delete(st.idle, id)
		}
	}
	st.mu.Lock()
	st.retry.Retain(func(k policyKey, s policySubject) bool { return subjects[k.id] == s })
	st.mu.Unlock()
}

// tryPolicy starts action on r, unless an earlier failure's backoff holds
// it back or an action of r's owner runs, and reports whether it started.
// try reports whether it acted (it does not when the process is busy or
// has changed). The first failure of a streak is logged, published as a
// process event with a warning and noted on the process; later ones only
// lengthen the wait.
func (d *Daemon) tryPolicy(st *policyState, now time.Time, r proctable.Record, action string, try func() (bool, error)) bool {
	key, subject := policyKey{id: r.ID, action: action}, subjectOf(r)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.running[r.Owner.UID] || !st.retry.Ready(key, subject, now) {
		return false
	}
	st.running[r.Owner.UID] = true
	st.actions.Add(1)
	go func() {
		defer st.actions.Done()
		tried, err := try()
		st.mu.Lock()
		defer st.mu.Unlock()
		delete(st.running, r.Owner.UID)
		d.policyDone(st, now, r, key, subject, action, tried, err)
	}()
	return true
}

// policyDone records how action on r went; the caller holds st.mu.
func (d *Daemon) policyDone(st *policyState, now time.Time, r proctable.Record, key policyKey, subject policySubject, action string, tried bool, err error) {
	switch {
	case !tried:
	case err == nil:
		if s := st.retry.Succeed(key); s.Failures > 0 {
			d.log.Info("policy action succeeded after failing", zap.String("name", r.Name), zap.String("policy", action),
				zap.Int("failures", s.Failures), zap.Duration("since", now.Sub(s.Since)))
		}
	default:
		s := st.retry.Fail(key, subject, now)
		if s.Failures == 1 {
			d.policyFailed(r, action, err, s.Next.Sub(now))
		} else {
			d.log.Debug("policy action failed again", zap.String("name", r.Name), zap.String("policy", action),
				zap.Int("failures", s.Failures), zap.Time("next", s.Next), zap.Error(err))
		}
	}
}

// policyFailed reports the failure that starts a streak: one log line, one
// event, and the process's note.
func (d *Daemon) policyFailed(r proctable.Record, action string, cause error, wait time.Duration) {
	verb := map[string]string{actionTTL: "hibernate", actionIdle: "freeze"}[action]
	msg := fmt.Sprintf("%s policy: %s failed; retrying in %v, then less often (at most every %v) until it succeeds or the process changes: %v",
		action, verb, wait, policyRetryMax, cause)
	d.log.Warn("policy action failed; retrying with backoff", zap.String("name", r.Name), zap.String("policy", action),
		zap.Duration("retry_in", wait), zap.Error(cause))
	cur, err := d.table.Update(r.Key(), func(x *proctable.Record) error {
		if x.ID != r.ID {
			return errReplaced
		}
		x.Note = msg
		return nil
	})
	if err != nil {
		return // replaced or gone: nobody to tell
	}
	p := toAPI(cur, d.gpuView())
	d.events.publish(api.Event{Type: api.EventProcess, Time: time.Now(), Name: cur.Name, State: cur.State, Process: &p, Warning: msg})
}

// failLevel is the level a failed freeze or hibernate logs at: a policy's
// try (quiet) is logged by the policy, once per failure streak.
func failLevel(quiet bool) zapcore.Level {
	if quiet {
		return zapcore.DebugLevel
	}
	return zapcore.WarnLevel
}

// idleFreeze freezes r after its GPUs were idle for long enough; it reports
// whether it tried.
func (d *Daemon) idleFreeze(ctx context.Context, r proctable.Record, idleFor time.Duration) (bool, error) {
	if d.driver == nil {
		return false, nil
	}
	unlock, ok := d.ops.tryLock(r.Key())
	if !ok {
		return false, nil
	}
	defer unlock()
	cur, ok := d.table.Get(r.Key())
	if !ok || cur.ID != r.ID || cur.State != api.StateRunning {
		return false, nil
	}
	if _, err := d.freezeLocked(ctx, cur, freezeOpts{lockTimeout: d.cfg.LockTimeout, stop: d.cfg.FreezeStop, quiet: true}); err != nil {
		return true, err
	}
	_, _ = d.table.Update(r.Key(), func(x *proctable.Record) error {
		if x.ID == r.ID {
			x.Note = fmt.Sprintf("frozen after its GPUs were idle for %v (idle)", idleFor.Round(time.Millisecond))
		}
		return nil
	})
	d.log.Info("froze an idle process", zap.String("name", r.Name), zap.Duration("idle", idleFor))
	return true, nil
}

// idleTracker remembers, per running process, since when its GPU memory
// has not changed and it has kept its GPUs busy in no sample.
type idleTracker map[string]idleMark

type idleMark struct {
	vram  uint64
	since time.Time
}

// observe returns since when r has been idle (now if it is busy).
func (t idleTracker) observe(r proctable.Record, view *gpuView, now time.Time) time.Time {
	p := toAPI(r, view)
	busy := false
	for _, g := range p.GPUs {
		busy = busy || view.busy(r.ID, g.UUID)
	}
	m, ok := t[r.ID]
	if !ok || busy || m.vram != p.VRAMMiB {
		m = idleMark{vram: p.VRAMMiB, since: now}
		t[r.ID] = m
	}
	return m.since
}
