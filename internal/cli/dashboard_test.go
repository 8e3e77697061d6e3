package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/gpusched/gpusched/pkg/api"
)

// dashNow is the clock of the test snapshots.
var dashNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// fakeDashSource serves canned data and records the actions asked of it.
type fakeDashSource struct {
	mu     sync.Mutex
	calls  []string // "freeze train", ...
	actErr error    // what every action fails with

	procs  []api.Process
	gpus   []api.GPU
	jobs   []api.Job
	status *api.Status

	events    []api.Event // Events sends these, then ends with eventsErr
	eventsErr error
}

func (f *fakeDashSource) record(verb, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, verb+" "+name)
	return f.actErr
}

func (f *fakeDashSource) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeDashSource) PS(context.Context) ([]api.Process, error) { return f.procs, nil }
func (f *fakeDashSource) GPUs(context.Context) ([]api.GPU, error)   { return f.gpus, nil }
func (f *fakeDashSource) Jobs(context.Context) ([]api.Job, error)   { return f.jobs, nil }
func (f *fakeDashSource) Status(context.Context) (*api.Status, error) {
	return f.status, nil
}

func (f *fakeDashSource) Freeze(_ context.Context, name string) (*api.CheckpointResult, error) {
	if err := f.record("freeze", name); err != nil {
		return nil, err
	}
	return &api.CheckpointResult{Name: name, Op: "freeze", Driver: "sim", PIDs: []int{42}, Bytes: 2 << 30,
		MS: map[string]float64{"total": 120}}, nil
}

func (f *fakeDashSource) Thaw(_ context.Context, name string) (*api.CheckpointResult, error) {
	if err := f.record("thaw", name); err != nil {
		return nil, err
	}
	return &api.CheckpointResult{Name: name, Op: "thaw", Driver: "sim", PIDs: []int{42}, Bytes: 2 << 30,
		MS: map[string]float64{"total": 80}}, nil
}

func (f *fakeDashSource) Hibernate(_ context.Context, name string) (*api.HibernateResult, error) {
	if err := f.record("hibernate", name); err != nil {
		return nil, err
	}
	return &api.HibernateResult{Name: name, Snapshot: "snap-1", Pages: 10, Written: 40960, MS: map[string]float64{"total": 300}}, nil
}

func (f *fakeDashSource) Kill(_ context.Context, name string) (*api.Process, error) {
	if err := f.record("kill", name); err != nil {
		return nil, err
	}
	p := exited(name, api.Exit{Signal: "SIGTERM"})
	return &p, nil
}

func (f *fakeDashSource) Events(_ context.Context, onEvent func(*api.Event) error) error {
	for i := range f.events {
		if err := onEvent(&f.events[i]); err != nil {
			return err
		}
	}
	return f.eventsErr
}

// newTestDash is a dashboard over src, drawn without colour.
func newTestDash(src dashSource) dashModel {
	return newDashModel(context.Background(), src, false)
}

// step applies one message.
func step(t *testing.T, m dashModel, msg tea.Msg) (dashModel, tea.Cmd) {
	t.Helper()
	next, cmd := m.Update(msg)
	return next.(dashModel), cmd
}

// press types key: a character, or a named key ("up", "down", "ctrl+c").
func press(t *testing.T, m dashModel, key string) (dashModel, tea.Cmd) {
	t.Helper()
	k, ok := map[string]tea.KeyPressMsg{
		"up": {Code: tea.KeyUp}, "down": {Code: tea.KeyDown}, "ctrl+c": {Code: 'c', Mod: tea.ModCtrl},
		"home": {Code: tea.KeyHome}, "end": {Code: tea.KeyEnd}, "esc": {Code: tea.KeyEscape},
	}[key]
	if !ok {
		r := []rune(key)[0]
		k = tea.KeyPressMsg{Code: r, Text: key}
	}
	if k.String() != key {
		t.Fatalf("key %q reads as %q", key, k.String())
	}
	return step(t, m, k)
}

// snapshotOf is a loaded snapshot holding processes named names.
func snapshotOf(names ...string) dashSnapshotMsg {
	procs := make([]api.Process, len(names))
	for i, n := range names {
		procs[i] = proc(n)
	}
	return dashSnapshotMsg{procs: procs, gpus: []api.GPU{}, jobs: []api.Job{}, status: &api.Status{}, at: dashNow}
}

// loaded is a dashboard that has loaded processes named names.
func loaded(t *testing.T, src dashSource, names ...string) dashModel {
	t.Helper()
	m, _ := step(t, newTestDash(src), snapshotOf(names...))
	return m
}

// rows lists the process table's names in order.
func rows(m dashModel) []string {
	var out []string
	for _, p := range m.procs {
		out = append(out, p.Name)
	}
	return out
}

// selectedRow is the name on the table row marked as selected in the view.
func selectedRow(t *testing.T, m dashModel) string {
	t.Helper()
	var found []string
	for _, l := range strings.Split(m.render(), "\n") {
		if rest, ok := strings.CutPrefix(l, "> "); ok {
			found = append(found, strings.Fields(rest)[0])
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d rows marked selected in\n%s", len(found), m.render())
	}
	return found[0]
}

// run runs cmd, which must be an action, and applies its result.
func runAction(t *testing.T, m dashModel, cmd tea.Cmd) dashModel {
	t.Helper()
	if cmd == nil {
		t.Fatal("no command to run")
	}
	msg, ok := cmd().(dashActionMsg)
	if !ok {
		t.Fatalf("command gave %T, want an action result", msg)
	}
	m, _ = step(t, m, msg)
	return m
}

func TestDashboardStableOrderAndSelectionByName(t *testing.T) {
	m := loaded(t, &fakeDashSource{}, "c", "a", "b")
	if got := rows(m); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("rows %v, want by name", got)
	}
	if m.selected != "a" || selectedRow(t, m) != "a" {
		t.Fatalf("first load selects %q (row %q), want the first row", m.selected, selectedRow(t, m))
	}
	m, _ = press(t, m, "down")
	if m.selected != "b" {
		t.Fatalf("down selects %q, want b", m.selected)
	}

	// Rows appear above it: the same process stays selected, on another row.
	m, _ = step(t, m, snapshotOf("b", "aa", "c", "a", "ab"))
	if got := rows(m); !slices.Equal(got, []string{"a", "aa", "ab", "b", "c"}) {
		t.Fatalf("rows %v", got)
	}
	if m.selected != "b" || m.cursor != 3 || selectedRow(t, m) != "b" {
		t.Fatalf("after rows were added above: selected %q at row %d, want b at 3", m.selected, m.cursor)
	}

	// It disappears, and a row above it too: its neighbour is selected.
	m, _ = step(t, m, snapshotOf("a", "ab", "c"))
	if m.selected != "c" || selectedRow(t, m) != "c" {
		t.Fatalf("after b went: selected %q, want its neighbour c", m.selected)
	}

	// The last row disappears: the one before it is selected.
	m, _ = step(t, m, snapshotOf("a", "ab"))
	if m.selected != "ab" {
		t.Fatalf("after the last row went: selected %q, want ab", m.selected)
	}

	// Moving stops at the ends.
	m, _ = press(t, m, "down")
	m, _ = press(t, m, "down")
	if m.selected != "ab" {
		t.Fatalf("down past the end selects %q", m.selected)
	}
	m, _ = press(t, m, "home")
	if m.selected != "a" {
		t.Fatalf("home selects %q", m.selected)
	}

	// Nothing left, then something again.
	m, _ = step(t, m, snapshotOf())
	if m.selected != "" {
		t.Fatalf("empty table still selects %q", m.selected)
	}
	if _, cmd := press(t, m, "f"); cmd != nil {
		t.Fatal("f with nothing selected ran an action")
	}
	m, _ = step(t, m, snapshotOf("z", "y"))
	if m.selected != "y" {
		t.Fatalf("selected %q, want the first row", m.selected)
	}
}

func TestDashboardSmallTerminalScrollsToSelection(t *testing.T) {
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("p%02d", i)
	}
	m := loaded(t, &fakeDashSource{}, names...)
	m, _ = step(t, m, tea.WindowSizeMsg{Width: 120, Height: 30})
	m, _ = press(t, m, "end")
	if m.selected != "p39" || selectedRow(t, m) != "p39" {
		t.Fatalf("end selects %q", m.selected)
	}
	view := m.render()
	if n := strings.Count(view, "\n") + 1; n > 30 {
		t.Errorf("view has %d lines for a 30-line terminal:\n%s", n, view)
	}
	if strings.Contains(view, "p00") || !strings.Contains(view, "of 40)") {
		t.Errorf("table not scrolled to the selection:\n%s", view)
	}
}

func TestDashboardKillAsksFirst(t *testing.T) {
	src := &fakeDashSource{}
	m := loaded(t, src, "a", "b", "c")
	m, _ = press(t, m, "down")

	// Any key but y cancels, and sends nothing.
	for _, key := range []string{"n", "esc", "k", "Y"} {
		var cmd tea.Cmd
		m, cmd = press(t, m, "k")
		if cmd != nil || !strings.Contains(m.render(), "kill b? y/n") {
			t.Fatalf("k did not ask:\n%s", m.render())
		}
		m, cmd = press(t, m, key)
		if cmd != nil {
			t.Fatalf("%q after k ran a command", key)
		}
		if !strings.Contains(m.render(), "kill b cancelled") {
			t.Fatalf("%q after k: no cancellation shown:\n%s", key, m.render())
		}
	}
	if calls := src.recorded(); len(calls) != 0 {
		t.Fatalf("calls %v before any y", calls)
	}

	// The question is about the process selected when k was pressed, even
	// when a refresh moves the rows meanwhile.
	m, _ = press(t, m, "k")
	m, _ = step(t, m, snapshotOf("0", "a", "b", "c"))
	m, cmd := press(t, m, "y")
	if !strings.Contains(m.render(), "killing b…") {
		t.Errorf("no progress shown:\n%s", m.render())
	}
	m = runAction(t, m, cmd)
	if calls := src.recorded(); !slices.Equal(calls, []string{"kill b"}) {
		t.Fatalf("calls %v, want [kill b]", calls)
	}
	if !strings.Contains(m.render(), "killed b: exited, signal SIGTERM") {
		t.Errorf("no result shown:\n%s", m.render())
	}
}

func TestDashboardActionsSendSelectedName(t *testing.T) {
	for _, tc := range []struct {
		key, call, says string
	}{
		{"f", "freeze b", "froze b: 2.0 GiB from 1 CUDA process in 120ms"},
		{"t", "thaw b", "thawed b: 2.0 GiB from 1 CUDA process in 80ms"},
		{"h", "hibernate b", "hibernated b to snapshot snap-1 in 300ms"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			src := &fakeDashSource{}
			m := loaded(t, src, "c", "a", "b")
			m, _ = press(t, m, "down")
			m, cmd := press(t, m, tc.key)
			m = runAction(t, m, cmd)
			if calls := src.recorded(); !slices.Equal(calls, []string{tc.call}) {
				t.Fatalf("calls %v, want [%s]", calls, tc.call)
			}
			if !strings.Contains(m.render(), tc.says) {
				t.Errorf("status line does not say %q:\n%s", tc.says, m.render())
			}
		})
	}
}

func TestDashboardActionErrorSentence(t *testing.T) {
	src := &fakeDashSource{actErr: api.Errorf(api.CodeConflict, "process %q is running, not frozen", "a")}
	m := loaded(t, src, "a")
	m, cmd := press(t, m, "t")
	m = runAction(t, m, cmd)
	want := `thaw a: process "a" is running, not frozen (conflict)`
	if !strings.Contains(m.render(), want) {
		t.Errorf("view does not show %q:\n%s", want, m.render())
	}
}

func TestDashboardActionRefreshes(t *testing.T) {
	src := &fakeDashSource{procs: []api.Process{proc("a")}, gpus: []api.GPU{}, jobs: []api.Job{}, status: &api.Status{}}
	m := loaded(t, src, "a")
	m, cmd := press(t, m, "f")
	msg := cmd()
	_, refresh := step(t, m, msg)
	if refresh == nil {
		t.Fatal("an action's result asks for no refresh")
	}
	if _, ok := refresh().(dashSnapshotMsg); !ok {
		t.Fatal("the refresh does not load a snapshot")
	}
}

func TestDashboardEventsPane(t *testing.T) {
	m := loaded(t, &fakeDashSource{}, "train")
	if !strings.Contains(m.render(), "none yet") {
		t.Fatalf("empty event pane:\n%s", m.render())
	}
	m, cmd := step(t, m, dashEventMsg{api.Event{Type: api.EventSubscribed, Time: dashNow}})
	if cmd == nil {
		t.Fatal("subscribed does not refresh")
	}
	// A refresh is in flight: more events ask for one more, once it is in.
	for i := range dashMaxEvents + 2 {
		var cmd tea.Cmd
		m, cmd = step(t, m, dashEventMsg{api.Event{Seq: uint64(i), Type: api.EventProcess, Time: dashNow.Add(time.Duration(i) * time.Second),
			Name: fmt.Sprintf("p%02d", i), State: api.StateFrozen, PrevState: api.StateRunning}})
		if cmd != nil {
			t.Fatalf("event %d starts a second refresh while one loads", i)
		}
	}
	m, cmd = step(t, m, snapshotOf("train"))
	if cmd == nil {
		t.Fatal("events during a refresh were not followed by another")
	}
	m, cmd = step(t, m, snapshotOf("train"))
	if cmd != nil {
		t.Fatal("a refresh with no event meanwhile started another")
	}

	var shown []string
	for _, l := range strings.Split(m.render(), "\n") {
		if strings.Contains(l, "running→frozen") {
			shown = append(shown, l)
		}
	}
	if len(shown) != dashMaxEvents {
		t.Fatalf("%d events shown, want the last %d:\n%s", len(shown), dashMaxEvents, m.render())
	}
	if !strings.Contains(shown[0], "p02 running→frozen") || !strings.Contains(shown[len(shown)-1], "p11 running→frozen") {
		t.Errorf("not the last events, newest last: %q", shown)
	}
	stamp := dashNow.Add(11 * time.Second).Local().Format("15:04:05")
	if !strings.HasPrefix(strings.TrimSpace(shown[len(shown)-1]), stamp+" process") {
		t.Errorf("event line %q does not start with its time %s", shown[len(shown)-1], stamp)
	}

	// Other kinds of events read as sentences too.
	for _, tc := range []struct {
		e    api.Event
		want string
	}{
		{api.Event{Type: api.EventRemoved, Name: "train"}, "removed  train"},
		{api.Event{Type: api.EventJob, Name: "eval", JobState: api.JobQueued, Job: &api.Job{Reason: "waiting for 1 GPU"}}, "eval queued (waiting for 1 GPU)"},
		{api.Event{Type: api.EventJob, Name: "big", JobState: api.JobRunning, Warning: "peak 20.0 GiB over its 18.0 GiB"}, "big running: peak 20.0 GiB over its 18.0 GiB"},
		{api.Event{Type: api.EventLease, Lease: &api.Lease{ID: "l-1", User: "bob"}}, "l-1 granted to bob"},
		{api.Event{Type: api.EventFiller, Filler: &api.Filler{Index: 1, HeldMiB: 2048, User: "bob"}}, "GPU 1 holds 2.0 GiB (bob)"},
		{api.Event{Type: api.EventProcess, Name: "x", State: api.StateExited, PrevState: api.StateRunning,
			Process: &api.Process{Exit: &api.Exit{Code: intp(3)}}}, "x running→exited (exit 3)"},
	} {
		m, _ = step(t, m, dashEventMsg{tc.e})
		if !strings.Contains(m.render(), tc.want) {
			t.Errorf("%s event: view lacks %q", tc.e.Type, tc.want)
		}
	}

	m, _ = step(t, m, dashEventsEndedMsg{err: api.Errorf(api.CodeUnavailable, "event stream fell more than 1024 events behind; subscribe again")})
	if !strings.Contains(m.render(), "event stream ended (event stream fell more than 1024 events behind; subscribe again (unavailable)), subscribing again") {
		t.Errorf("the stream's end is not shown:\n%s", m.render())
	}
	m, _ = step(t, m, dashEventMsg{api.Event{Type: api.EventSubscribed}})
	if strings.Contains(m.render(), "event stream ended") {
		t.Errorf("still says the stream ended after subscribing again")
	}
}

// barsSnapshot is a snapshot with two GPUs, frozen memory and snapshots.
func barsSnapshot() dashSnapshotMsg {
	s := snapshotOf("train")
	frozen := proc("reward")
	frozen.State, frozen.Tier, frozen.VRAMMiB, frozen.HostMiB = api.StateFrozen, api.TierHost, 0, 8<<10
	s.procs = append(s.procs, frozen)
	s.gpus = []api.GPU{
		{Index: 0, Name: "H100", TotalMiB: 80 << 10, UsedMiB: 40 << 10, UtilPercent: intp(45), TempC: intp(62), Healthy: true,
			Filler: &api.Filler{Index: 0, User: "alice", HeldMiB: 10 << 10, TargetMiB: 40 << 10}, FrozenMiB: 8 << 10,
			Leases: []string{"l-1"}, Unhealthy: []string{}},
		{Index: 1, Name: "H100", TotalMiB: 80 << 10, UsedMiB: 512, Healthy: false,
			Unhealthy: []string{"GPU 1 is at 91C, over --max-temp 85C"}, Leases: []string{}},
	}
	s.status = &api.Status{Version: "1.2.3", Backend: "sim", Processes: 1, States: map[api.State]int{api.StateRunning: 1},
		HostMiB: 12 << 10, RAMBudgetMiB: 64 << 10, DiskBytes: 3 << 29, DiskBudget: 10 << 30, DiskFree: 90 << 30, DiskKeepFree: 10 << 30,
		CRIU: "4.1.1", Driver: "sim",
		Jobs: map[api.JobState]int{api.JobQueued: 1}}
	q := queuedJob("eval")
	s.jobs = []api.Job{q}
	return s
}

func TestDashboardViewShowsBarsWithNumbers(t *testing.T) {
	m, _ := step(t, newTestDash(&fakeDashSource{}), barsSnapshot())
	view := m.render()
	for _, want := range []string{
		// 30 cells of 80 GiB: 30 GiB used by processes (11), 10 GiB of
		// filler (4), 8 GiB frozen (3), the rest free.
		"0 H100 [███████████▓▓▓▓▒▒▒············] 40.0 GiB/80.0 GiB  util 45%  temp 62C  ok",
		"filler 10.0 GiB (alice, target 40.0 GiB) · frozen 8.0 GiB in host RAM · leases l-1",
		// A small part still shows as one cell.
		"1 H100 [█·····························] 512 MiB/80.0 GiB  util -  temp -  unhealthy",
		"GPU 1 is at 91C, over --max-temp 85C",
		"host RAM  [▒▒▒▒▒▒························] 12.0 GiB/64.0 GiB frozen",
		"disk      [█████·························] 1.5 GiB/10.0 GiB in snapshots · 80.0 GiB free to dumps",
		"gpusched 1.2.3 dashboard (sim backend)",
		"processes 1 (running 1) · jobs 1 queued",
		"j-eval  eval  queued  auto  waiting for 1 GPU with 18.0 GiB free",
		// A frozen process's memory is in host RAM.
		"reward  frozen   host  alice  0,1   8.0 GiB in RAM",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q", want)
		}
	}
	if strings.Contains(view, "\x1b") {
		t.Errorf("a no-colour view has escape codes:\n%q", view)
	}
	if t.Failed() {
		t.Logf("view:\n%s", view)
	}
}

func TestDashboardHibernatedShowsNeededVRAM(t *testing.T) {
	// A hibernated process holds no GPU memory; its disk_mib is what its
	// thaw needs.
	s := snapshotOf("train")
	hib := proc("reward")
	hib.State, hib.Tier, hib.VRAMMiB, hib.DiskMiB, hib.Snapshot = api.StateHibernated, api.TierDisk, 0, 12000, "snap-2"
	for i := range hib.GPUs {
		hib.GPUs[i].UsedMiB = 0
	}
	s.procs = append(s.procs, hib)
	m, _ := step(t, newTestDash(&fakeDashSource{}), s)
	want := "reward  hibernated  disk  alice  0,1   (11.7 GiB) on disk"
	if !strings.Contains(m.render(), want) {
		t.Errorf("view lacks %q:\n%s", want, m.render())
	}
}

func TestDashboardViewUnlimitedBudgetsAndNoCRIU(t *testing.T) {
	s := barsSnapshot()
	s.status.RAMBudgetMiB, s.status.DiskBudget, s.status.DiskBytes, s.status.CRIU = 0, 0, 0, ""
	m, _ := step(t, newTestDash(&fakeDashSource{}), s)
	for _, want := range []string{"host RAM  12.0 GiB frozen, no budget", "disk      off (no CRIU)"} {
		if !strings.Contains(m.render(), want) {
			t.Errorf("view lacks %q:\n%s", want, m.render())
		}
	}
}

func TestDashboardColourIsOnlyDecoration(t *testing.T) {
	plain, _ := step(t, newTestDash(&fakeDashSource{}), barsSnapshot())
	coloured, _ := step(t, newDashModel(context.Background(), &fakeDashSource{}, true), barsSnapshot())
	if !strings.Contains(coloured.render(), "\x1b[") {
		t.Fatal("a colour renderer draws no colour")
	}
	if got := ansi.Strip(coloured.render()); got != plain.render() {
		t.Errorf("without its escape codes the coloured view is\n%s\nnot\n%s", got, plain.render())
	}
}

func TestDashboardRefreshFailureKeepsData(t *testing.T) {
	m := loaded(t, &fakeDashSource{}, "train")
	m, _ = step(t, m, dashSnapshotMsg{err: errors.New("gpusched daemon is not running at /x"), at: dashNow})
	view := m.render()
	if !strings.Contains(view, "refresh failed: gpusched daemon is not running at /x") || !strings.Contains(view, "> train") {
		t.Errorf("a failed refresh should say so and keep the table:\n%s", view)
	}
	m, _ = step(t, m, snapshotOf("train"))
	if strings.Contains(m.render(), "refresh failed") {
		t.Errorf("the failure stays after a good refresh")
	}
}

func TestDashboardTickRefreshes(t *testing.T) {
	m := loaded(t, &fakeDashSource{}, "train")
	m, cmd := step(t, m, dashTickMsg(dashNow.Add(time.Minute)))
	if cmd == nil || !m.loading {
		t.Fatal("a tick does not refresh")
	}
	// While that refresh loads, the next tick only reschedules.
	_, cmd = step(t, m, dashTickMsg(dashNow.Add(2*time.Minute)))
	if cmd == nil {
		t.Fatal("a tick does not schedule the next one")
	}
}

func TestDashboardQuits(t *testing.T) {
	for _, key := range []string{"q", "ctrl+c"} {
		_, cmd := press(t, loaded(t, &fakeDashSource{}, "a"), key)
		if cmd == nil {
			t.Fatalf("%s: no command", key)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s does not quit", key)
		}
	}
	// Ctrl-C quits even while a kill waits for its y/n.
	m, _ := press(t, loaded(t, &fakeDashSource{}, "a"), "k")
	_, cmd := press(t, m, "ctrl+c")
	if cmd == nil {
		t.Fatal("ctrl+c during a kill question: no command")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("ctrl+c during a kill question does not quit")
	}
}

func TestDashboardViewIsAltScreen(t *testing.T) {
	m, _ := step(t, newTestDash(&fakeDashSource{}), barsSnapshot())
	v := m.View()
	if !v.AltScreen || v.Content != m.render() {
		t.Errorf("View: alt screen %v, content %q, want the alt screen with %q", v.AltScreen, v.Content, m.render())
	}
	if !strings.Contains(newTestDash(&fakeDashSource{}).render(), "loading…") {
		t.Error("before the first snapshot the screen does not say it is loading")
	}
}

func TestDashboardHelp(t *testing.T) {
	m := loaded(t, &fakeDashSource{}, "a")
	if !strings.Contains(m.render(), "? help") || strings.Contains(m.render(), dashHelp[0]) {
		t.Fatalf("help line:\n%s", m.render())
	}
	m, _ = press(t, m, "?")
	if !strings.Contains(m.render(), dashHelp[0]) {
		t.Errorf("? shows no help:\n%s", m.render())
	}
}

func TestDashboardFeedEventsResubscribes(t *testing.T) {
	src := &fakeDashSource{
		events:    []api.Event{{Type: api.EventSubscribed}, {Type: api.EventProcess, Name: "a", State: api.StateRunning}},
		eventsErr: api.Errorf(api.CodeUnavailable, "gpuschedd is shutting down"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs := make(chan tea.Msg, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		feedEvents(ctx, src, func(m tea.Msg) {
			select {
			case msgs <- m:
			case <-ctx.Done():
			}
		}, 0)
	}()
	var got []tea.Msg
	ended := 0
	for ended < 2 { // the stream ends, is subscribed again, and ends again
		m := <-msgs
		got = append(got, m)
		if _, ok := m.(dashEventsEndedMsg); ok {
			ended++
		}
	}
	cancel()
	<-done
	if len(got) != 6 {
		t.Fatalf("got %d messages, want 2 × (2 events, 1 end): %#v", len(got), got)
	}
	if e, ok := got[1].(dashEventMsg); !ok || e.event.Name != "a" {
		t.Errorf("second message %#v, want the process event", got[1])
	}
	if e, ok := got[2].(dashEventsEndedMsg); !ok || !errors.Is(e.err, src.eventsErr) {
		t.Errorf("third message %#v, want the end with its error", got[2])
	}
}

func TestDashboardRefusesJSON(t *testing.T) {
	_, errOut, code := ctl(t, nil, "--json", "dashboard")
	if code != exitUsage || !strings.Contains(errOut, "dashboard is interactive and has no --json output") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestDashboardNeedsTerminal(t *testing.T) {
	d := newFakeDaemon(t, nil)
	out, errOut, code := ctl(t, d, "dashboard")
	if code != exitFailure || errOut != "gpuschedctl: "+errNotTerminal.Error()+"\n" || out != "" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := len(d.requests()); n != 0 {
		t.Errorf("the daemon got %d requests", n)
	}
}

// TestDashboardAgainstFakeDaemon runs the real data source against the
// CLI's fake daemon: a snapshot, an action and the events stream, each on
// the connections the dashboard uses.
func TestDashboardAgainstFakeDaemon(t *testing.T) {
	snap := barsSnapshot()
	hib := proc("video")
	hib.State, hib.Tier, hib.VRAMMiB, hib.DiskMiB, hib.Snapshot = api.StateHibernated, api.TierDisk, 0, 3<<10, "snap-1"
	d := newFakeDaemon(t, map[string]handler{
		api.MethodPS:     answer(result(api.PSResult{Processes: []api.Process{proc("train"), proc("eval"), hib}})),
		api.MethodGPUs:   answer(result(api.GPUsResult{GPUs: snap.gpus})),
		api.MethodJobs:   answer(result(api.JobsResult{Jobs: snap.jobs})),
		api.MethodStatus: answer(result(snap.status)),
		api.MethodFreeze: func(req api.Request) []any {
			var p api.FreezeParams
			_ = json.Unmarshal(req.Params, &p)
			return []any{failure(api.CodeConflict, fmt.Sprintf("process %q is already frozen", p.Name))}
		},
		api.MethodEvents: answer(
			event(api.Event{Type: api.EventSubscribed, Time: dashNow}),
			event(api.Event{Seq: 7, Type: api.EventProcess, Time: dashNow, Name: "train", State: api.StateFrozen, PrevState: api.StateRunning}),
			hold{}),
	})
	a := &app{socket: d.path, connectTimeout: 5 * time.Second}
	src := &apiSource{dial: a.dial}
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := newDashModel(ctx, src, false)

	// Two snapshots on one connection.
	for range 2 {
		msg := m.load()()
		if s := msg.(dashSnapshotMsg); s.err != nil {
			t.Fatalf("load: %v", s.err)
		}
		m, _ = step(t, m, msg)
	}
	if got := rows(m); !slices.Equal(got, []string{"eval", "train", "video"}) {
		t.Errorf("rows %v", got)
	}
	view := m.render()
	for _, want := range []string{"40.0 GiB/80.0 GiB", "12.0 GiB/64.0 GiB frozen", "j-eval", "> eval", "(3.0 GiB) on disk"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	var methods []string
	for _, r := range d.requests() {
		methods = append(methods, r.Method)
	}
	if want := []string{"ps", "gpus", "jobs", "status", "ps", "gpus", "jobs", "status"}; !slices.Equal(methods, want) {
		t.Errorf("methods %v, want %v", methods, want)
	}
	if conns := d.connections(); slices.Max(conns) != 1 {
		t.Errorf("snapshots used connections %v, want one", conns)
	}

	// An action, on a connection of its own, by the selected name.
	m, _ = press(t, m, "down")
	m, cmd := press(t, m, "f")
	m = runAction(t, m, cmd)
	reqs := d.requests()
	last := reqs[len(reqs)-1]
	var fp api.FreezeParams
	if err := json.Unmarshal(last.Params, &fp); err != nil || last.Method != api.MethodFreeze || fp.Name != "train" {
		t.Errorf("last request %s %s, want freeze of train", last.Method, last.Params)
	}
	if conns := d.connections(); conns[len(conns)-1] == 1 {
		t.Error("the action shared the query connection")
	}
	if want := `freeze train: process "train" is already frozen (conflict)`; !strings.Contains(m.render(), want) {
		t.Errorf("view lacks %q:\n%s", want, m.render())
	}

	// The events stream.
	evCtx, stop := context.WithCancel(ctx)
	msgs := make(chan tea.Msg, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		feedEvents(evCtx, src, func(m tea.Msg) {
			select {
			case msgs <- m:
			case <-evCtx.Done():
			}
		}, time.Hour)
	}()
	for range 2 {
		msg := <-msgs
		if _, ok := msg.(dashEventMsg); !ok {
			t.Fatalf("got %#v, want an event", msg)
		}
		m, _ = step(t, m, msg)
	}
	stop()
	<-done
	if !strings.Contains(m.render(), "train running→frozen") {
		t.Errorf("event pane lacks the event:\n%s", m.render())
	}
	if len(msgs) != 0 {
		t.Errorf("%d more messages after the events: %#v", len(msgs), <-msgs)
	}
}

// TestDashboardActsOnTheSelectedUsersProcess: where root's view lists two
// users' processes of one name, an action names the selected one as
// UID/NAME (names are per user), the selection stays on that user's
// across a refresh, and a name listed once is sent as it is.
func TestDashboardActsOnTheSelectedUsersProcess(t *testing.T) {
	src := &fakeDashSource{}
	snap := snapshotOf("train", "train", "solo")
	snap.procs[0].UID, snap.procs[1].UID = 1001, 1000
	m, _ := step(t, newTestDash(src), snap)
	m, _ = press(t, m, "down")
	m, _ = press(t, m, "down") // solo, then 1000's train, then 1001's
	m, cmd := press(t, m, "f")
	m = runAction(t, m, cmd)
	if m, _ = step(t, m, snap); m.target != "1001/train" {
		t.Errorf("after a refresh the selection is %q, want 1001/train", m.target)
	}
	m, _ = press(t, m, "k")
	if want := "kill train? y/n"; m.note != want {
		t.Errorf("note %q, want %q", m.note, want)
	}
	m, cmd = press(t, m, "y")
	m = runAction(t, m, cmd)
	m, _ = press(t, m, "home")
	_, cmd = press(t, m, "t")
	runAction(t, m, cmd)
	if got, want := src.recorded(), []string{"freeze 1001/train", "kill 1001/train", "thaw solo"}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
}
