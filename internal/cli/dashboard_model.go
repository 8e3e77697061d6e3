package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/gpusched/gpusched/pkg/api"
)

const (
	dashMaxEvents   = 10               // events kept in the event pane
	dashRefresh     = time.Second      // the safety-net refresh period
	dashLoadTimeout = 10 * time.Second // a refresh that takes longer fails
)

// Messages of the dashboard model. Update is a pure function of the model
// and these (plus tea.KeyPressMsg and tea.WindowSizeMsg); all I/O happens
// in the commands it returns.
type (
	// dashSnapshotMsg carries a refresh's result: everything, or err.
	dashSnapshotMsg struct {
		procs  []api.Process
		gpus   []api.GPU
		jobs   []api.Job
		status *api.Status
		err    error
		at     time.Time // when it was taken
	}
	// dashEventMsg is one event of the events stream.
	dashEventMsg struct{ event api.Event }
	// dashEventsEndedMsg says the events stream ended (it is subscribed
	// again after a pause).
	dashEventsEndedMsg struct{ err error }
	// dashTickMsg is the periodic refresh.
	dashTickMsg time.Time
	// dashActionMsg is the outcome of an action on a process.
	dashActionMsg struct {
		verb, name string
		text       string // what it did, when it worked
		err        error
	}
)

// dashModel is the dashboard's state.
type dashModel struct {
	ctx    context.Context // ends every command's call
	src    dashSource
	styles dashStyles

	width, height int // of the terminal; 0 until known

	loaded  bool
	loadErr error // the last refresh's failure; the previous data stays shown
	now     time.Time
	procs   []api.Process // by name
	gpus    []api.GPU
	jobs    []api.Job
	status  *api.Status

	// selected is the selected process's name, "" when there is none;
	// cursor is its row. The selection follows the name across refreshes.
	// target is how an action names it to the daemon (dashTarget).
	selected, target string
	cursor           int

	loading bool // a refresh is in flight
	stale   bool // and another one was asked for meanwhile

	events     []api.Event // the last dashMaxEvents, oldest first
	eventsNote string      // why the events stream is down, "" when up

	confirmKill string // the process (its target) a kill waits a y/n for
	note        string // the status line: the last action's outcome
	noteErr     bool   // and it failed
	help        bool
}

// newDashModel builds a model that reads from and acts through src under
// ctx, drawn in colour or not.
func newDashModel(ctx context.Context, src dashSource, colour bool) dashModel {
	return dashModel{ctx: ctx, src: src, styles: newDashStyles(colour), loading: true}
}

// Init loads the first snapshot (the model starts out loading) and starts
// the periodic refresh.
func (m dashModel) Init() tea.Cmd {
	return tea.Batch(m.load(), dashTick())
}

// Update applies one message.
func (m dashModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case tea.KeyPressMsg:
		return m.key(msg)
	case dashSnapshotMsg:
		m.loading = false
		m.now = msg.at
		if msg.err != nil {
			m.loadErr = msg.err
		} else {
			m.loaded, m.loadErr = true, nil
			m.gpus, m.jobs, m.status = msg.gpus, msg.jobs, msg.status
			m.setProcs(msg.procs)
		}
		if m.stale {
			m.stale = false
			return m, m.refresh()
		}
		return m, nil
	case dashEventMsg:
		if msg.event.Type == api.EventSubscribed {
			m.eventsNote = "" // subscribed (again): what happened meanwhile comes with the refresh
		} else {
			m.events = append(m.events, msg.event)
			if n := len(m.events) - dashMaxEvents; n > 0 {
				m.events = slices.Delete(m.events, 0, n)
			}
		}
		return m, m.refresh()
	case dashEventsEndedMsg:
		m.eventsNote = "event stream ended, subscribing again"
		if msg.err != nil {
			m.eventsNote = fmt.Sprintf("event stream ended (%s), subscribing again", errorLine(msg.err))
		}
		return m, nil
	case dashTickMsg:
		m.now = time.Time(msg)
		return m, tea.Batch(m.refresh(), dashTick())
	case dashActionMsg:
		if msg.err != nil {
			m.setNote(fmt.Sprintf("%s %s: %s", msg.verb, msg.name, errorLine(msg.err)), true)
		} else {
			m.setNote(msg.text, false)
		}
		return m, m.refresh()
	}
	return m, nil
}

// key handles one key press.
func (m dashModel) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	key := k.String()
	if key == "ctrl+c" {
		return m, tea.Quit
	}
	if target := m.confirmKill; target != "" {
		m.confirmKill = ""
		if key != "y" {
			m.setNote("kill "+dashName(target)+" cancelled", false)
			return m, nil
		}
		return m.start("kill", target)
	}
	switch key {
	case "q":
		return m, tea.Quit
	case "?":
		m.help = !m.help
	case "up":
		m.move(-1)
	case "down":
		m.move(1)
	case "pgup":
		m.move(-10)
	case "pgdown":
		m.move(10)
	case "home":
		m.move(-len(m.procs))
	case "end":
		m.move(len(m.procs))
	case "r":
		return m, m.refresh()
	case "f":
		return m.start("freeze", m.target)
	case "t":
		return m.start("thaw", m.target)
	case "h":
		return m.start("hibernate", m.target)
	case "k":
		if m.selected == "" {
			m.setNote("no process selected", false)
			return m, nil
		}
		m.confirmKill = m.target
		m.setNote("kill "+m.selected+"? y/n", false)
	}
	return m, nil
}

// dashActing is what the status line says while an action runs.
var dashActing = map[string]string{"freeze": "freezing", "thaw": "thawing", "hibernate": "hibernating", "kill": "killing"}

// start runs verb on the process target names.
func (m dashModel) start(verb, target string) (tea.Model, tea.Cmd) {
	if target == "" {
		m.setNote("no process selected", false)
		return m, nil
	}
	name := dashName(target)
	m.setNote(dashActing[verb]+" "+name+"…", false)
	ctx, src := m.ctx, m.src
	return m, func() tea.Msg {
		text, err := dashAct(ctx, src, verb, target)
		return dashActionMsg{verb: verb, name: name, text: text, err: err}
	}
}

// dashTarget is how an action names procs[i] to the daemon: by its name,
// or where several users' processes of that name are listed (root's
// view; names are per user) as UID/NAME.
func dashTarget(procs []api.Process, i int) string {
	p := procs[i]
	for j, q := range procs {
		if j != i && q.Name == p.Name {
			return strconv.FormatUint(uint64(p.UID), 10) + "/" + p.Name
		}
	}
	return p.Name
}

// dashName is the process name in a target.
func dashName(target string) string {
	_, name, _ := strings.Cut(target, "/")
	if name == "" {
		return target
	}
	return name
}

// dashAct calls verb on name and says what it did in one line.
func dashAct(ctx context.Context, src dashSource, verb, name string) (string, error) {
	var b strings.Builder
	switch verb {
	case "freeze", "thaw":
		act := src.Freeze
		if verb == "thaw" {
			act = src.Thaw
		}
		res, err := act(ctx, name)
		if err != nil {
			return "", err
		}
		_ = writeCheckpoint(&b, res)
	case "hibernate":
		res, err := src.Hibernate(ctx, name)
		if err != nil {
			return "", err
		}
		_ = writeHibernate(&b, res)
	case "kill":
		p, err := src.Kill(ctx, name)
		if err != nil {
			return "", err
		}
		b.WriteString("killed " + summary(p))
	default:
		return "", fmt.Errorf("unknown action %q", verb)
	}
	return strings.ReplaceAll(strings.TrimSpace(b.String()), "\n", "; "), nil
}

// setNote puts text on the status line.
func (m *dashModel) setNote(text string, failed bool) {
	m.note, m.noteErr = text, failed
}

// move moves the selection by d rows, within the table.
func (m *dashModel) move(d int) {
	if len(m.procs) == 0 {
		return
	}
	m.cursor = min(max(m.cursor+d, 0), len(m.procs)-1)
	m.selected, m.target = m.procs[m.cursor].Name, dashTarget(m.procs, m.cursor)
}

// setProcs shows procs by name and keeps the selection on the same name:
// when that process is gone, on its neighbour (the next name, else the
// last row); with no selection yet, on the first row.
func (m *dashModel) setProcs(procs []api.Process) {
	procs = slices.Clone(procs)
	slices.SortStableFunc(procs, func(a, b api.Process) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID)) })
	m.procs = procs
	if len(procs) == 0 {
		m.cursor, m.selected, m.target = 0, "", ""
		return
	}
	i, _ := slices.BinarySearchFunc(procs, m.selected, func(p api.Process, name string) int { return cmp.Compare(p.Name, name) })
	for j := i; j < len(procs) && procs[j].Name == m.selected; j++ {
		if dashTarget(procs, j) == m.target {
			i = j // the same user's, where several users' of that name are listed
			break
		}
	}
	m.cursor = min(i, len(procs)-1)
	m.selected, m.target = procs[m.cursor].Name, dashTarget(procs, m.cursor)
}

// refresh loads a snapshot, or, while one is loading, asks for another
// once it is in: a burst of events costs at most two refreshes.
func (m *dashModel) refresh() tea.Cmd {
	if m.loading {
		m.stale = true
		return nil
	}
	m.loading = true
	return m.load()
}

// load reads a snapshot from the source.
func (m dashModel) load() tea.Cmd {
	ctx, src := m.ctx, m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, dashLoadTimeout)
		defer cancel()
		return loadSnapshot(ctx, src)
	}
}

// loadSnapshot reads processes, GPUs, jobs and the overview.
func loadSnapshot(ctx context.Context, src dashSource) dashSnapshotMsg {
	var (
		s   dashSnapshotMsg
		err error
	)
	if s.procs, err = src.PS(ctx); err == nil {
		if s.gpus, err = src.GPUs(ctx); err == nil {
			if s.jobs, err = src.Jobs(ctx); err == nil {
				s.status, err = src.Status(ctx)
			}
		}
	}
	s.err, s.at = err, time.Now()
	return s
}

// dashTick schedules the next periodic refresh.
func dashTick() tea.Cmd {
	return tea.Tick(dashRefresh, func(t time.Time) tea.Msg { return dashTickMsg(t) })
}
