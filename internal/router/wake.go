package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/pkg/api"
)

// Retry pacing of a wake that waits for room: it retries at each change
// the router sees (a hold let go), and at least this often for changes
// only the daemon sees (another user's process exiting).
const (
	retryMin = 10 * time.Millisecond
	retryMax = 250 * time.Millisecond
)

// startWake starts m's wake; every request for m waits for it. Callers
// hold r.mu.
func (r *Router) startWake(m *model) {
	r.tickets++
	w := &wakeCall{done: make(chan struct{}), ticket: r.tickets}
	m.wake = w
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		start := time.Now()
		h, err := r.wake(m, w)
		r.mu.Lock()
		m.wake = nil
		w.err = err
		if err == nil {
			m.hold, m.served, m.broken = h, 0, false
			r.metrics.wakeSeconds.WithLabelValues(m.cfg.Name, tier(h.Was())).Observe(time.Since(start).Seconds())
			r.log.Info("woke", zapModel(m), zap.String("from", tier(h.Was())), zap.Duration("took", time.Since(start)))
		} else {
			r.metrics.wakeFailures.WithLabelValues(m.cfg.Name).Inc()
			r.log.Warn("wake failed", zapModel(m), zap.Error(err))
		}
		var unused Hold
		if err == nil && r.unneeded(m) {
			unused = r.letGo(m) // everyone who asked gave up meanwhile
		}
		r.broadcast()
		r.mu.Unlock()
		close(w.done)
		r.closeHold(m, unused)
	}()
}

// wake makes m resident and held: a cold start when it has no live
// process, else an activation (thaw from RAM or disk, or a hold of a
// running one). It waits its turn behind older wakes that need room on
// the same GPUs, and for room, until the start timeout.
func (r *Router) wake(m *model, w *wakeCall) (Hold, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.StartTimeout)
	defer cancel()
	name := m.cfg.Name
	pause := retryMin
	var noRoom error // the last answer that there is no room yet
	fail := func(err error) (Hold, error) {
		if noRoom != nil && ctx.Err() != nil { // the start timeout ran out in a call
			return nil, fmt.Errorf("model %q: %w after %v (last: %v)", name, errNoRoom, r.cfg.StartTimeout, noRoom)
		}
		return nil, err
	}
	for {
		p, err := r.processOf(ctx, m)
		if err != nil {
			return fail(err)
		}
		if p.State != api.StateRunning || r.contendedBefore(m, w) {
			// It needs room, or holds room another asked for first: it
			// goes after the wakes that asked first.
			if err := r.waitTurn(ctx, m, w); err != nil {
				return nil, fmt.Errorf("model %q: waiting for its turn to wake: %w", name, err)
			}
			if p, err = r.processOf(ctx, m); err != nil {
				return fail(err)
			}
		}
		if p.State == api.StateRunning && r.isSuspect(m) {
			// Its server failed a request: serving again needs it to
			// answer its health path; exited, it starts cold.
			err := r.waitHealthy(ctx, m)
			if errors.As(err, new(exitedError)) {
				continue
			}
			if err != nil {
				return nil, err
			}
			r.mu.Lock()
			m.suspect = false
			r.mu.Unlock()
		}
		if p.State == api.StateFailed {
			// Its GPU state is lost (the driver says so): only a new
			// process can serve.
			r.log.Warn("killing a model whose GPU state is lost", zapModel(m), zap.String("error", p.Error))
			if err := r.d.Kill(ctx, name); err != nil && !api.IsConflict(err) {
				return nil, fmt.Errorf("model %q: kill its failed process: %w", name, err)
			}
			p.State = api.StateExited
		}
		var h Hold
		if p.State == api.StateExited {
			h, err = r.coldStart(ctx, m, w)
		} else {
			h, err = r.hold(ctx, m)
		}
		switch {
		case err == nil:
			r.learnSlots(ctx, m)
			return h, nil
		case api.CodeOf(err) == api.CodeResourceExhausted || errors.Is(err, errNoRoom):
			noRoom = err
			r.setContending(m, w, true)
		case api.IsConflict(err) || api.IsExists(err):
			// In a transition (freezing, starting) or raced by another
			// client: look again.
		default:
			return fail(err)
		}
		if err := r.pauseFor(ctx, pause); err != nil {
			return nil, fmt.Errorf("model %q: %w after %v (last: %v)", name, errNoRoom, r.cfg.StartTimeout, err)
		}
		pause = min(2*pause, retryMax)
	}
}

func (r *Router) isSuspect(m *model) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m.suspect
}

// processOf returns m's process; one that does not exist reads as exited.
func (r *Router) processOf(ctx context.Context, m *model) (*api.Process, error) {
	p, err := r.d.Process(ctx, m.cfg.Name)
	switch {
	case api.IsNotFound(err):
		return &api.Process{State: api.StateExited}, nil
	case err != nil:
		return nil, fmt.Errorf("model %q: %w", m.cfg.Name, err)
	}
	return p, nil
}

// waitTurn waits until no older wake of a model sharing a GPU with m is
// in progress: room goes to the model that asked first, and a cold start
// keeps its GPUs until its memory is counted (waitResident).
func (r *Router) waitTurn(ctx context.Context, m *model, w *wakeCall) error {
	r.mu.Lock()
	w.queued = true
	defer func() {
		r.mu.Lock()
		w.queued = false
		r.mu.Unlock()
	}()
	for {
		ahead := false
		for _, o := range r.models {
			if o != m && o.wake != nil && o.wake.ticket < w.ticket && overlaps(o.cfg, m.cfg) {
				ahead = true
				break
			}
		}
		if !ahead {
			r.mu.Unlock()
			return nil
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
		r.mu.Lock()
	}
}

// contendedBefore says whether an older wake of a model sharing a GPU with m
// waits for room.
func (r *Router) contendedBefore(m *model, w *wakeCall) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.models {
		if o != m && o.wake != nil && o.wake.contending && o.wake.ticket < w.ticket && overlaps(o.cfg, m.cfg) {
			return true
		}
	}
	return false
}

// pauseFor waits for a change the router sees, or d, or ctx.
func (r *Router) pauseFor(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	changed := r.changed
	r.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-t.C:
	}
	return nil
}

// setContending marks m's wake as waiting for room, and lets go the idle
// holds that may be keeping it.
func (r *Router) setContending(m *model, w *wakeCall, on bool) {
	r.mu.Lock()
	var idle map[*model]Hold
	if w.contending != on {
		w.contending = on
		if on {
			idle = r.releaseIdleHolds(m)
			for _, o := range r.models {
				if o != m && overlaps(o.cfg, m.cfg) {
					r.armTurnEnd(o)
				}
			}
		}
		r.broadcast()
	}
	r.mu.Unlock()
	for o, h := range idle {
		r.closeHold(o, h)
	}
}

// evictFor names the processes an activation of m may freeze: the
// router's idle models on its GPUs that have a process, least recently
// used first; nil (the daemon's choice: the user's least recently active
// unheld processes there) when there are none.
func (r *Router) evictFor(ctx context.Context, m *model) ([]string, error) {
	r.mu.Lock()
	idle := r.idleLRU(m)
	r.mu.Unlock()
	if len(idle) == 0 {
		return nil, nil
	}
	ps, err := r.d.PS(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range idle {
		if slices.ContainsFunc(ps, func(p api.Process) bool { return p.Name == o.cfg.Name }) {
			names = append(names, o.cfg.Name)
		}
	}
	return names, nil
}

// hold activates m with hold, offering its idle neighbours as room.
func (r *Router) hold(ctx context.Context, m *model) (Hold, error) {
	evict, err := r.evictFor(ctx, m)
	if err != nil {
		return nil, err
	}
	return r.d.Hold(ctx, m.cfg.Name, evict)
}

// coldStart starts m's server as a managed process once its GPUs have
// room, holds it as soon as it runs (so that no activation freezes it
// while it loads), and waits until it answers its health path.
func (r *Router) coldStart(ctx context.Context, m *model, w *wakeCall) (Hold, error) {
	if err := r.makeRoom(ctx, m); err != nil {
		return nil, err
	}
	c := m.cfg
	_, err := r.d.Run(ctx, api.RunParams{Name: c.Name, Cmd: c.Argv(), GPUs: c.GPUs, Env: r.modelEnv(c), TTL: api.Duration(c.Hibernate)})
	if err != nil {
		return nil, fmt.Errorf("start model %q: %w", c.Name, err)
	}
	h, err := r.holdStarted(ctx, m)
	if err != nil {
		return nil, err
	}
	if err := r.waitHealthy(ctx, m); err != nil {
		h.Close()
		return nil, err
	}
	r.waitResident(ctx, m)
	return coldHold{h}, nil
}

// residentWait bounds how long a started model's memory may take to show
// in the daemon's GPU samples.
const residentWait = 2 * time.Second

// waitResident waits until the daemon counts the VRAM a model just
// started holds (it samples GPU memory, so there is no event), for at
// most residentWait: until then an activation of another model would be
// admitted into memory the new one is about to take, and run out of it.
// Wakes queued behind this one wait for it.
func (r *Router) waitResident(ctx context.Context, m *model) {
	if m.cfg.VRAMMiB == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, residentWait)
	defer cancel()
	for {
		if p, err := r.d.Process(ctx, m.cfg.Name); err != nil || p.VRAMMiB*100 >= m.cfg.VRAMMiB*90 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(healthPoll):
		}
	}
}

// holdStarted holds a process just started, once it runs.
func (r *Router) holdStarted(ctx context.Context, m *model) (Hold, error) {
	pause := retryMin
	for {
		h, err := r.d.Hold(ctx, m.cfg.Name, nil)
		if !api.IsConflict(err) { // conflict: still starting
			return h, err
		}
		p, perr := r.d.Process(ctx, m.cfg.Name)
		if perr == nil && p.State == api.StateExited {
			return nil, r.exited(ctx, m, p, "while starting")
		}
		if err := r.pauseFor(ctx, pause); err != nil {
			return nil, fmt.Errorf("model %q: not running after %v: %w", m.cfg.Name, r.cfg.StartTimeout, err)
		}
		pause = min(2*pause, retryMax)
	}
}

// coldHold is the hold of a model that started cold: it woke from nothing.
type coldHold struct{ Hold }

func (coldHold) Was() api.State { return "" }

// makeRoom frees m's VRAM on each of its GPUs by freezing the router's
// idle models there, least recently used first. It returns errNoRoom when
// none is left to freeze and the GPUs still lack room.
func (r *Router) makeRoom(ctx context.Context, m *model) error {
	if m.cfg.VRAMMiB == 0 {
		return nil
	}
	for {
		gpus, err := r.d.GPUs(ctx)
		if err != nil {
			return err
		}
		short := shortOf(gpus, m.cfg)
		if short == "" {
			return nil
		}
		r.mu.Lock()
		idle := r.idleLRU(m)
		r.mu.Unlock()
		froze := false
		for _, o := range idle {
			p, err := r.d.Process(ctx, o.cfg.Name)
			if err != nil || p.State != api.StateRunning {
				continue
			}
			if err := r.d.Freeze(ctx, o.cfg.Name); err != nil {
				r.log.Warn("freeze to make room", zapModel(o), zap.String("for", m.cfg.Name), zap.Error(err))
				continue
			}
			r.log.Info("froze to make room", zapModel(o), zap.String("for", m.cfg.Name))
			froze = true
			break
		}
		if !froze {
			return fmt.Errorf("%w: %s", errNoRoom, short)
		}
	}
}

// shortOf says which of c's GPUs lack c.VRAMMiB free ("" when none does).
func shortOf(gpus []api.GPU, c *Model) string {
	var short []string
	for _, g := range gpus {
		if !usesGPU(c, g) {
			continue
		}
		if g.FreeMiB < c.VRAMMiB {
			short = append(short, fmt.Sprintf("GPU %d has %d MiB free, needs %d", g.Index, g.FreeMiB, c.VRAMMiB))
		}
	}
	return strings.Join(short, "; ")
}

func usesGPU(c *Model, g api.GPU) bool {
	if len(c.GPUs) == 0 {
		return true
	}
	for _, ref := range c.GPUs {
		if ref.UUID == g.UUID || ref.UUID == "" && ref.Index == g.Index {
			return true
		}
	}
	return false
}

// healthPoll is how often a starting server's health path is asked: the
// server says nothing when it is ready, so it is polled.
const healthPoll = 50 * time.Millisecond

// waitHealthy polls m's health path until it answers 200, failing early
// when the process exits (with the tail of its log).
func (r *Router) waitHealthy(ctx context.Context, m *model) error {
	url := fmt.Sprintf("http://127.0.0.1:%d%s", m.cfg.Port, m.cfg.Health)
	client := m.probeClient()
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for i := 0; ; i++ {
		req, err := r.serverRequest(ctx, url)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if i%5 == 4 { // every 250 ms: has it died?
			if p, err := r.d.Process(ctx, m.cfg.Name); err == nil && p.State == api.StateExited {
				return r.exited(ctx, m, p, "while starting")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("model %q: %s did not answer 200 within %v", m.cfg.Name, url, r.cfg.StartTimeout)
		case <-t.C:
		}
	}
}

// probeClient asks m's server what the router itself needs to know (its
// health, its slots), each call within 2 s.
func (m *model) probeClient() *http.Client {
	return &http.Client{Transport: m.transport, Timeout: 2 * time.Second}
}

// serverRequest is a GET of url at a model's server, with the router's
// model_key where it has one.
func (r *Router) serverRequest(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil && r.cfg.ModelKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.ModelKey)
	}
	return req, err
}

// exitedError explains an exit of m's process with the last lines of its log.
func (r *Router) exited(ctx context.Context, m *model, p *api.Process, when string) error {
	how := "exited"
	if p.Exit != nil {
		switch {
		case p.Exit.Code != nil:
			how = fmt.Sprintf("exited with status %d", *p.Exit.Code)
		case p.Exit.Signal != "":
			how = "was killed by " + p.Exit.Signal
		}
	}
	msg := fmt.Sprintf("model %q %s %s", m.cfg.Name, how, when)
	if lines, err := r.d.Logs(ctx, m.cfg.Name, 5); err == nil && len(lines) > 0 {
		msg += "; its log ends: " + strings.Join(lines, " | ")
	}
	return exitedError(msg)
}

// exitedError is a model's process found exited.
type exitedError string

func (e exitedError) Error() string { return string(e) }
