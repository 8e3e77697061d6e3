package schedwait

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Wait is one stretch a thread spent runnable without a CPU: from its
// wake-up (or from being preempted) to the switch that ran it.
type Wait struct {
	Tid      int
	Woken    bool  // false: preempted, put back in its queue
	Waker    int   // the thread that woke it (0: unknown, or preempted)
	From, To int64 // CLOCK_MONOTONIC, ns
	Queued   int   // the CPU it was woken onto or preempted on
	Ran      int   // the CPU that ran it
	Behind   int   // the thread on Queued when it began (0: idle)
	IdleCPUs int   // CPUs idle when it began
	// Before is the thread Ran switched from to run it (0: idle), and
	// BeforeBlocked whether that thread blocked (asleep, or in an
	// uninterruptible wait) rather than being preempted: a wait that
	// ended as the thread before it blocked was not cut short by the
	// scheduler.
	Before        int
	BeforeBlocked bool
	// Unrecorded: the trace lacks the switch that ran it; To is the last
	// event on Ran before the thread was seen running there, the earliest
	// it can have ended.
	Unrecorded bool
}

// Trace is what Parse took from a recording.
type Trace struct {
	Waits      []Wait
	Tgid       map[int]int    // thread to process, for threads seen running
	Comm       map[int]string // thread to name
	CPUs       int            // CPUs seen
	Start, End int64          // first and last event
	Events     int            // events read
	Lost       int            // events the buffers dropped or the text says were lost
}

// Parse reads the text of a tracefs instance's trace (record-tgid on,
// trace_clock mono, the events Start enables; its lines are in time order
// across CPUs) and keeps the waits of threads whose name keep accepts.
// A wake-up of a thread already running or waiting is no wait; a wait
// whose end the trace does not hold is left out.
func Parse(r io.Reader, keep func(comm string) bool) (*Trace, error) {
	t := &Trace{Tgid: map[int]int{}, Comm: map[int]string{}}
	p := parser{t: t, keep: keep, cur: map[int]int{}, on: map[int]int{}, last: map[int]int64{}, waker: map[int]int{}, pending: map[int]Wait{}}
	s := lines(r)
	for s.Scan() {
		l := s.Text()
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		if strings.Contains(l, "LOST") && strings.Contains(l, "EVENTS]") {
			t.Lost += lostIn(l)
			continue
		}
		e, ok, err := parseLine(l)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		t.Events++
		p.apply(e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("schedwait: %w", err)
	}
	if t.Events == 0 {
		return nil, errNoEvents
	}
	t.CPUs = len(p.cur)
	return t, nil
}

// event is one line of the trace.
type event struct {
	pid, tgid, cpu int // the thread current on cpu when it happened (tgid 0: unknown)
	ts             int64
	name           string // sched_switch, sched_waking or sched_wakeup
	// sched_switch: prev is pid; next runs now. sched_waking: pid (the
	// waker) wakes target. sched_wakeup: the thread woken is target, onto
	// CPU to.
	prevComm, prevState string
	next                int
	nextComm            string
	target              int
	targetComm          string
	to                  int
}

// parser follows each CPU's current thread through the trace.
type parser struct {
	t       *Trace
	keep    func(string) bool
	cur     map[int]int   // CPU to its current thread, for CPUs seen switching
	on      map[int]int   // thread to the CPU it runs on, for threads running
	idle    int           // CPUs whose current thread is the idle one
	last    map[int]int64 // CPU to the time of its last event
	waker   map[int]int   // thread being woken to the thread waking it
	pending map[int]Wait
}

// current takes the thread of e's line for its CPU's current one. Where
// it is not the one the CPU last switched to, the switch is missing from
// the trace (on some kernels a CPU leaving idle records none): a wait of
// that thread is taken to end at the CPU's event before, the earliest it
// can have ended.
func (p *parser) current(e event) {
	old, seen := p.cur[e.cpu]
	if seen && old == e.pid {
		return
	}
	if !seen {
		p.cur[e.cpu] = -1 // not idle, not a thread: counts nowhere
	}
	p.run(e.cpu, e.pid)
	if w, ok := p.pending[e.pid]; ok && seen {
		delete(p.pending, e.pid)
		w.To, w.Ran, w.Unrecorded = max(w.From, p.last[e.cpu]), e.cpu, true
		p.t.Waits = append(p.t.Waits, w)
	}
}

// run makes tid (0: idle) the current thread of cpu.
func (p *parser) run(cpu, tid int) {
	if old := p.cur[cpu]; old == 0 {
		p.idle--
	} else if p.on[old] == cpu {
		delete(p.on, old)
	}
	p.cur[cpu] = tid
	if tid == 0 {
		p.idle++
	} else {
		p.on[tid] = cpu
	}
}

func (p *parser) apply(e event) {
	t := p.t
	if t.Start == 0 {
		t.Start = e.ts
	}
	t.End = e.ts
	if e.pid != 0 && e.tgid != 0 {
		t.Tgid[e.pid] = e.tgid
	}
	p.current(e)
	p.last[e.cpu] = e.ts
	switch e.name {
	case "sched_waking": // in the waker's context, unlike sched_wakeup
		p.waker[e.target] = e.pid
	case "sched_wakeup":
		t.Comm[e.target] = e.targetComm
		waker := p.waker[e.target]
		delete(p.waker, e.target)
		if _, running := p.on[e.target]; running || !p.keep(e.targetComm) {
			return
		}
		if _, waiting := p.pending[e.target]; waiting {
			return
		}
		p.pending[e.target] = Wait{Tid: e.target, Woken: true, Waker: waker, From: e.ts, Queued: e.to, Behind: p.cur[e.to], IdleCPUs: p.idle}
	case "sched_switch":
		t.Comm[e.pid], t.Comm[e.next] = e.prevComm, e.nextComm
		p.run(e.cpu, e.next)
		if e.pid != 0 && strings.HasPrefix(e.prevState, "R") && p.keep(e.prevComm) {
			p.pending[e.pid] = Wait{Tid: e.pid, From: e.ts, Queued: e.cpu, Behind: e.next, IdleCPUs: p.idle}
		}
		if w, ok := p.pending[e.next]; ok {
			delete(p.pending, e.next)
			w.To, w.Ran, w.Before, w.BeforeBlocked = e.ts, e.cpu, e.pid, !strings.HasPrefix(e.prevState, "R")
			t.Waits = append(t.Waits, w)
		}
	}
}

// parseLine reads one event line:
//
//	TASK-PID (TGID) [CPU] FLAGS SECONDS.MICROS: EVENT: FIELDS
//
// ok is false for other events.
func parseLine(l string) (e event, ok bool, err error) {
	bad := func() (event, bool, error) { return event{}, false, fmt.Errorf("schedwait: unreadable line %q", l) }
	i := strings.Index(l, ": sched_")
	if i < 0 {
		return event{}, false, nil
	}
	head, rest := l[:i], l[i+2:]
	name, fields, found := strings.Cut(rest, ": ")
	if !found {
		return bad()
	}
	e.name = name
	cpuAt := strings.LastIndex(head, " [")
	closeAt := strings.LastIndex(head, "] ")
	if cpuAt < 0 || closeAt < cpuAt {
		return bad()
	}
	if e.cpu, err = strconv.Atoi(head[cpuAt+2 : closeAt]); err != nil {
		return bad()
	}
	after := strings.Fields(head[closeAt+2:])
	if len(after) == 0 {
		return bad()
	}
	if e.ts, err = parseSeconds(after[len(after)-1]); err != nil {
		return bad()
	}
	task := strings.TrimSpace(head[:cpuAt])
	if strings.HasSuffix(task, ")") {
		open := strings.LastIndex(task, "(")
		if open < 0 {
			return bad()
		}
		e.tgid, _ = strconv.Atoi(strings.TrimSpace(task[open+1 : len(task)-1])) // "-------": unknown
		task = strings.TrimSpace(task[:open])
	}
	dash := strings.LastIndex(task, "-")
	if dash < 0 {
		return bad()
	}
	if e.pid, err = strconv.Atoi(task[dash+1:]); err != nil {
		return bad()
	}
	switch name {
	case "sched_switch":
		prev, next, found := strings.Cut(fields, " ==> ")
		if !found {
			return bad()
		}
		var pf [4]string
		var nf [3]string
		if !keyed(prev, pf[:], "prev_comm", "prev_pid", "prev_prio", "prev_state") || !keyed(next, nf[:], "next_comm", "next_pid", "next_prio") {
			return bad()
		}
		e.prevComm, e.prevState, e.nextComm = pf[0], pf[3], nf[0]
		if e.next, err = strconv.Atoi(nf[1]); err != nil {
			return bad()
		}
	case "sched_waking", "sched_wakeup":
		var f [4]string
		if !keyed(fields, f[:], "comm", "pid", "prio", "target_cpu") {
			return bad()
		}
		e.targetComm = f[0]
		if e.target, err = strconv.Atoi(f[1]); err != nil {
			return bad()
		}
		if e.to, err = strconv.Atoi(f[3]); err != nil {
			return bad()
		}
	default:
		return event{}, false, nil
	}
	return e, true, nil
}

// keyed splits "k1=v1 k2=v2 ..." with the keys in that order into
// values, one for each key; the first value (a thread's name) may hold
// spaces.
func keyed(s string, values []string, keys ...string) bool {
	for i := len(keys) - 1; i > 0; i-- {
		at := strings.LastIndex(s, keys[i])
		if at < 1 || s[at-1] != ' ' || at+len(keys[i]) >= len(s) || s[at+len(keys[i])] != '=' {
			return false
		}
		values[i] = strings.TrimSpace(s[at+len(keys[i])+1:])
		s = s[:at-1]
	}
	v, ok := strings.CutPrefix(s, keys[0]+"=")
	values[0] = v
	return ok
}

// parseSeconds reads "SECONDS.FRACTION:" as ns.
func parseSeconds(s string) (int64, error) {
	s = strings.TrimSuffix(s, ":")
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	ns, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	for range 9 - len(frac) {
		ns *= 10
	}
	return sec*1e9 + ns, nil
}

// lostIn reads the count of a "CPU:N [LOST COUNT EVENTS]" line.
func lostIn(l string) int {
	f := strings.Fields(l[strings.Index(l, "LOST"):])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// errNoEvents is Parse's answer to a text without one event line.
var errNoEvents = errors.New("schedwait: no scheduler events in the trace")

// lines scans r line by line, lines of any length.
func lines(r io.Reader) *bufio.Scanner {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	return s
}
