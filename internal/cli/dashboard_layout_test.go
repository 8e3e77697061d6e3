package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/gpusched/gpusched/pkg/api"
)

// dashKeyPrefix starts the key line.
const dashKeyPrefix = "f freeze · t thaw · h hibernate · k kill"

// busyDash is a dashboard with more of everything than fits a small
// terminal: the bars snapshot with 8 processes, 12 jobs and 12 events, the
// newest one "p11 running→frozen", sized width x height.
func busyDash(t *testing.T, width, height int) dashModel {
	t.Helper()
	s := barsSnapshot()
	for i := range 6 {
		s.procs = append(s.procs, proc(fmt.Sprintf("p%d", i)))
	}
	for i := range 11 {
		s.jobs = append(s.jobs, queuedJob(fmt.Sprintf("q%d", i)))
	}
	m, _ := step(t, newTestDash(&fakeDashSource{}), s)
	for i := range 12 {
		m, _ = step(t, m, dashEventMsg{api.Event{Seq: uint64(i), Type: api.EventProcess, Time: dashNow.Add(time.Duration(i) * time.Second),
			Name: fmt.Sprintf("p%02d", i), State: api.StateFrozen, PrevState: api.StateRunning}})
	}
	m, _ = step(t, m, tea.WindowSizeMsg{Width: width, Height: height})
	return m
}

// checkDashFits fails t unless view has at most height lines of at most width
// cells, starting with the title and ending with the key line, and holds
// every one of want.
func checkDashFits(t *testing.T, view string, width, height int, want ...string) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) > height {
		t.Errorf("%d lines for a %d-line terminal", len(lines), height)
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w > width {
			t.Errorf("line %d is %d cells wide, over %d: %q", i+1, w, width, l)
		}
	}
	if !strings.HasPrefix(lines[0], "gpusched 1.2.3 dashboard") {
		t.Errorf("first line %q, want the title", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, dashKeyPrefix) {
		t.Errorf("last line %q, want the key line", last)
	}
	for _, w := range want {
		if !strings.Contains(view, w) {
			t.Errorf("view lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("%dx%d view:\n%s", width, height, view)
	}
}

func TestDashboardFitsTerminal(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {100, 30}, {120, 40}} {
		w, h := size[0], size[1]
		t.Run(fmt.Sprintf("%dx%d", w, h), func(t *testing.T) {
			m := busyDash(t, w, h)
			// The selection scrolls into view; the kill question shows.
			m, _ = press(t, m, "end")
			m, _ = press(t, m, "k")
			checkDashFits(t, m.render(), w, h, "kill train? y/n", "> train", "p11 running→frozen", "GPUS", "host RAM", "disk",
				"PROCESSES", "QUEUE", "… and ", "EVENTS")
			if w == 80 && !strings.Contains(m.render(), "PROCESSES (4-8 of 8)") {
				t.Errorf("the process table does not scroll to the selection:\n%s", m.render())
			}

			// With the help open too.
			m, _ = press(t, m, "n")
			m, _ = press(t, m, "?")
			checkDashFits(t, m.render(), w, h, "kill train cancelled", dashHelp[len(dashHelp)-1][:20], "p11 running→frozen")
		})
	}
}

func TestDashboardWideTerminalShowsAll(t *testing.T) {
	m := busyDash(t, 120, 60)
	view := m.render()
	checkDashFits(t, view, 120, 60, "PROCESSES\n", "filler 10.0 GiB", "GPU 1 is at 91C", "frozen (room a thaw needs)",
		"… and 4 more (gpuschedctl jobs)", "p02 running→frozen")
	if strings.Contains(view, "p01 running→frozen") {
		t.Errorf("more than the last %d events:\n%s", dashMaxEvents, view)
	}
}

func TestDashboardStatusLineWraps(t *testing.T) {
	src := &fakeDashSource{actErr: api.Errorf(api.CodeResourceExhausted, `thaw "train": needs 8.0 GiB on GPU 0, 4.0 GiB free; %s`,
		strings.Repeat("and a long explanation ", 20))}
	m := busyDash(t, 80, 24)
	m.src = src
	m, cmd := press(t, m, "t")
	m = runAction(t, m, cmd)
	view := m.render()
	checkDashFits(t, view, 80, 24, `thaw p0: thaw "train": needs 8.0 GiB on GPU 0, 4.0 GiB free;`)
	lines := strings.Split(view, "\n")
	if last := lines[len(lines)-2]; !strings.HasSuffix(last, "…") {
		t.Errorf("a status over 3 lines does not end its third in …: %q", last)
	}
}

func TestDashboardShortTerminalKeepsFooter(t *testing.T) {
	for _, h := range []int{12, 5, 2} {
		m := busyDash(t, 80, h)
		m, _ = press(t, m, "k")
		lines := strings.Split(m.render(), "\n")
		if len(lines) != h {
			t.Errorf("height %d: %d lines", h, len(lines))
		}
		if !strings.HasPrefix(lines[len(lines)-1], dashKeyPrefix) || lines[len(lines)-2] != "kill p0? y/n" {
			t.Errorf("height %d: the footer is not the last two lines:\n%s", h, strings.Join(lines, "\n"))
		}
	}
}
