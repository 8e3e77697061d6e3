package main

import (
	"errors"
	"io"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

// span is an interval of trace time, in ns.
type span struct{ start, end int64 }

func (s span) len() int64 { return s.end - s.start }

func overlap(a, b span) int64 { return max(min(a.end, b.end)-max(a.start, b.start), 0) }

func total(s []span) float64 {
	var t int64
	for _, x := range s {
		t += x.len()
	}
	return float64(t)
}

// state is one stretch of a goroutine in one state; why is the reason and
// innermost frames of a wait.
type state struct {
	span
	st  trace.GoState
	why string
}

// region is one call on a connection's goroutine.
type region struct {
	span
	name string
}

// wokenAt is g's wake at t (within a microsecond), if there is one.
func (m *model) wokenAt(g trace.GoID, t int64) (wake, bool) {
	i, _ := slices.BinarySearchFunc(m.wakes, t-1000, func(w wake, t int64) int { return int(w.at - t) })
	for ; i < len(m.wakes) && m.wakes[i].at <= t+1000; i++ {
		if m.wakes[i].g == g {
			return m.wakes[i], true
		}
	}
	return wake{}, false
}

// onP is a stretch a goroutine ran on a P, with what it was (category).
type onP struct {
	span
	what string
}

// sample is one CPU profile sample: its time, goroutine and the innermost
// frame of ours in its stack.
type sample struct {
	at   int64
	g    trace.GoID
	ours string
}

// gor is what the trace says of one goroutine.
type gor struct {
	id      trace.GoID
	uid     string // the peer's uid, on a connection's goroutine
	name    string // where it started
	label   string // the runtime's label (GC workers)
	st      trace.GoState
	since   int64
	why     string
	states  []state // kept for connections only
	regions []region
	open    []int // regions begun and not ended
	runAt   int64 // when it last began running
}

// what a goroutine is, for "what ran on the Ps".
func (g *gor) what() string {
	switch {
	case g.label != "":
		return g.label
	case g.uid != "" && len(g.open) > 0:
		return "uid " + g.uid + " " + g.regions[g.open[len(g.open)-1]].name
	case g.uid != "":
		return "uid " + g.uid + " (between calls)"
	}
	return g.name
}

// justStarted is how soon after a P starts running a wake counts as that
// thread's: the runtime takes the P, then readies what the network had.
const justStarted = 50_000 // ns

// model is a trace, digested.
type model struct {
	start, end int64
	gs         map[trace.GoID]*gor
	order      []*gor // connections, in the order they were identified
	stw, mark  []span
	ran        []onP // sorted by start
	samples    []sample
	procs      int     // the daemon's Ps (GOMAXPROCS), as many as the trace names
	procStarts []int64 // when a P began running, sorted
	wakes      []wake  // connections' goroutines made runnable, in time order
}

// wake is a connection's goroutine made runnable after a wait: when, and
// by a thread that had just taken a P (one that had been waiting, on the
// network or for work) or by one already running.
type wake struct {
	at       int64
	g        trace.GoID
	fromIdle bool
}

// frames is the innermost frame of stk, and the innermost of ours
// (gpusched's) below the runtime's and the standard library's.
func frames(stk trace.Stack) (leaf, ours string) {
	for f := range stk.Frames() {
		if leaf == "" {
			leaf = f.Func
		}
		if strings.Contains(f.Func, "gpusched/") {
			return leaf, f.Func
		}
	}
	return leaf, ""
}

// load reads a whole trace.
func load(r io.Reader, op string) (*model, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	m := &model{start: -1, gs: map[trace.GoID]*gor{}}
	get := func(id trace.GoID) *gor {
		g := m.gs[id]
		if g == nil {
			g = &gor{id: id}
			m.gs[id] = g
		}
		return g
	}
	stwAt, markAt := int64(-1), int64(-1)
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		now := int64(ev.Time())
		if m.start < 0 {
			m.start = now
		}
		m.end = now
		switch ev.Kind() {
		case trace.EventLabel:
			if l := ev.Label(); l.Resource.Kind == trace.ResourceGoroutine {
				get(l.Resource.Goroutine()).label = l.Label
			}
		case trace.EventLog:
			if l := ev.Log(); l.Category == "conn" {
				g := get(ev.Goroutine())
				g.uid = l.Message
				m.order = append(m.order, g)
			}
		case trace.EventRegionBegin:
			g := get(ev.Goroutine())
			g.regions = append(g.regions, region{span{now, -1}, ev.Region().Type})
			g.open = append(g.open, len(g.regions)-1)
		case trace.EventRegionEnd:
			g := get(ev.Goroutine())
			if n := len(g.open); n > 0 {
				g.regions[g.open[n-1]].end = now
				g.open = g.open[:n-1]
			}
		case trace.EventRangeBegin, trace.EventRangeActive, trace.EventRangeEnd:
			name, begin := ev.Range().Name, ev.Kind() != trace.EventRangeEnd
			at, list := &stwAt, &m.stw
			switch {
			case strings.HasPrefix(name, "stop-the-world"):
			case name == "GC concurrent mark phase":
				at, list = &markAt, &m.mark
			default:
				continue
			}
			if begin {
				*at = now
			} else if *at >= 0 {
				*list = append(*list, span{*at, now})
				*at = -1
			}
		case trace.EventStackSample:
			if _, ours := frames(ev.Stack()); true {
				m.samples = append(m.samples, sample{now, ev.Goroutine(), ours})
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind == trace.ResourceProc {
				m.procs = max(m.procs, int(st.Resource.Proc())+1)
				if _, to := st.Proc(); to == trace.ProcRunning {
					m.procStarts = append(m.procStarts, now)
				}
				continue
			}
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := get(st.Resource.Goroutine())
			from, to := st.Goroutine()
			if from == trace.GoNotExist {
				_, g.name = frames(st.Stack)
			}
			if g.uid != "" && g.since > 0 {
				g.states = append(g.states, state{span{g.since, now}, g.st, g.why})
			}
			if from == trace.GoRunning && g.runAt > 0 {
				m.ran = append(m.ran, onP{span{g.runAt, now}, g.what()})
				g.runAt = 0
			}
			if to == trace.GoRunning {
				g.runAt = now
			}
			if g.uid != "" && from == trace.GoWaiting && to == trace.GoRunnable {
				n := len(m.procStarts)
				m.wakes = append(m.wakes, wake{now, g.id, n > 0 && now-m.procStarts[n-1] < justStarted})
			}
			g.st, g.since, g.why = to, now, ""
			if to != trace.GoRunning {
				leaf, ours := frames(st.Stack)
				g.why = strings.TrimSpace(st.Reason + " " + leaf + " < " + ours)
			}
		}
	}
	slices.SortFunc(m.ran, func(a, b onP) int { return int(a.start - b.start) })
	m.procs = max(m.procs, 1)
	return m, nil
}

// connsWith is the connections that made at least n calls of op, in order.
func (m *model) connsWith(op string, n int) []*gor {
	var out []*gor
	for _, g := range m.order {
		if len(m.calls(g, op)) >= n {
			out = append(out, g)
		}
	}
	return out
}

// call is one call of a connection: from the wake (its goroutine made
// runnable after waiting for the request) to the end of its region
// (reply written).
type call struct {
	span
	begun int64 // its region's start
}

// calls is g's finished calls of op.
func (m *model) calls(g *gor, op string) []call {
	var out []call
	prev, si := int64(0), 0
	for _, r := range g.regions {
		if r.end < 0 {
			continue
		}
		start := max(prev, g.regions[0].start)
		for ; si < len(g.states) && g.states[si].end <= r.start; si++ {
			if s := g.states[si]; s.st == trace.GoWaiting && s.end > prev {
				start = s.end
			}
		}
		prev = r.end
		if r.name == op {
			out = append(out, call{span{start, r.end}, r.start})
		}
	}
	return out
}

// ranDuring sums, by what ran, the Ps' time over w, and the Ps' time
// running no goroutine.
func (m *model) ranDuring(w span, into map[string]int64) {
	i, _ := slices.BinarySearchFunc(m.ran, w.end, func(r onP, t int64) int { return int(r.start - t) })
	var busy int64
	for j := i - 1; j >= 0 && j > i-50000; j-- {
		if o := overlap(m.ran[j].span, w); o > 0 {
			into[m.ran[j].what] += o
			busy += o
		}
	}
	into["(no goroutine on the P)"] += max(int64(m.procs)*w.len()-busy, 0)
}
