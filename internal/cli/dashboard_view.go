package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/gpusched/gpusched/pkg/api"
)

const (
	dashMaxJobs  = 8  // queue rows shown
	dashMinRows  = 3  // process rows and events shown however short the terminal
	dashBarWidth = 30 // cells of a bar on a wide terminal
)

// Bar cells. They tell the parts apart without colour too.
const (
	cellUsed   = "█"
	cellFiller = "▓"
	cellFrozen = "▒"
	cellFree   = "·"
)

// dashStyles are the dashboard's styles. Without colour they are plain and
// the screen is text only; with it, Bubble Tea still drops what the terminal
// cannot show, all of it under NO_COLOR.
type dashStyles struct {
	title, section, dim, selected       lipgloss.Style
	bad, warn, good                     lipgloss.Style
	used, filler, frozen, free, segment lipgloss.Style
}

func newDashStyles(colour bool) dashStyles {
	if !colour {
		return dashStyles{}
	}
	s := lipgloss.NewStyle
	return dashStyles{
		title:    s().Bold(true),
		section:  s().Bold(true).Foreground(lipgloss.Color("12")),
		dim:      s().Faint(true),
		selected: s().Reverse(true),
		bad:      s().Foreground(lipgloss.Color("9")),
		warn:     s().Foreground(lipgloss.Color("11")),
		good:     s().Foreground(lipgloss.Color("10")),
		used:     s().Foreground(lipgloss.Color("10")),
		filler:   s().Foreground(lipgloss.Color("13")),
		frozen:   s().Foreground(lipgloss.Color("14")),
		free:     s().Faint(true),
		segment:  s().Foreground(lipgloss.Color("10")),
	}
}

// barPart is one coloured stretch of a bar.
type barPart struct {
	n     uint64 // in the bar's unit
	cell  string
	style lipgloss.Style
}

// bar draws parts of total in width cells between brackets, the rest free.
// Each part takes its share of the cells, at least one when it is not zero,
// and never more than are left.
func (st dashStyles) bar(width int, total uint64, parts ...barPart) string {
	var b strings.Builder
	b.WriteString("[")
	left := width
	for _, p := range parts {
		if p.n == 0 || left == 0 || total == 0 {
			continue
		}
		cells := int((p.n*uint64(width) + total/2) / total)
		cells = min(max(cells, 1), left)
		b.WriteString(p.style.Render(strings.Repeat(p.cell, cells)))
		left -= cells
	}
	if left > 0 {
		b.WriteString(st.free.Render(strings.Repeat(cellFree, left)))
	}
	b.WriteString("]")
	return b.String()
}

// View draws the whole screen, on the alternate screen.
func (m dashModel) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "gpusched dashboard"
	return v
}

// render draws the whole screen as text: the header, the panes and the
// footer, fitted to the terminal (dashboard_layout.go).
func (m dashModel) render() string {
	head, foot := m.header(), m.footer()
	if !m.loaded {
		if m.loadErr == nil {
			head = append(head, "loading…")
		}
		lines := append(append(head, ""), foot...)
		if m.height > 0 {
			lines = lines[max(len(lines)-m.height, 0):]
		}
		return m.fit(lines)
	}
	panes := [dashPanes]dashPane{
		paneGPUs:   m.gpuPane(),
		paneProcs:  m.procPane(),
		paneQueue:  m.queuePane(),
		paneEvents: m.eventPane(),
	}
	return m.fit(dashLayout(m.height, head, panes, foot))
}

// fit joins lines, each cut to the terminal's width.
func (m dashModel) fit(lines []string) string {
	if m.width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, m.width, "")
		}
	}
	return strings.Join(lines, "\n")
}

// header is the title line, the daemon's counts and a failed refresh.
func (m dashModel) header() []string {
	st := m.styles
	title := "gpusched dashboard"
	if s := m.status; s != nil {
		title = fmt.Sprintf("gpusched %s dashboard (%s backend)", s.Version, s.Backend)
	}
	if !m.now.IsZero() {
		title += "  " + m.now.Local().Format("15:04:05")
	}
	out := []string{st.title.Render(title)}
	if s := m.status; s != nil {
		out = append(out, m.wrap(fmt.Sprintf("processes %s · jobs %s · checkpoint %s driver", stateCounts(s), jobCounts(s), orDash(s.Driver)), 2, dashPlain)...)
	}
	if m.loadErr != nil {
		out = append(out, m.wrap("refresh failed: "+errorLine(m.loadErr), 2, st.bad.Render)...)
	}
	return out
}

// footer is, with ?, the help, then the status line (the last action's
// outcome or the kill question) and the key line, the screen's last.
func (m dashModel) footer() []string {
	st := m.styles
	var out []string
	if m.help {
		for _, l := range dashHelp {
			out = append(out, m.wrap(l, 3, dashPlain)...)
		}
	}
	note := dashPlain
	switch {
	case m.confirmKill != "":
		note = st.warn.Render
	case m.noteErr:
		note = st.bad.Render
	}
	out = append(out, m.wrap(m.note, 3, note)...)
	return append(out, m.wrap(dashKeys, 2, st.dim.Render)...)
}

// dashPlain draws text as it is.
func dashPlain(s ...string) string { return strings.Join(s, " ") }

// dashFixedPane is a pane of lines that never shrinks.
func dashFixedPane(lines ...string) dashPane {
	return dashPane{fixed: len(lines), draw: func(int) []string { return slices.Clone(lines) }}
}

// gpuPane draws one bar per GPU, then the host RAM and disk bars. The line
// under a GPU of what holds or waits for its memory, why an unhealthy one
// is, and the bars' legend are its body: they give way first on a short
// terminal.
func (m dashModel) gpuPane() dashPane {
	st := m.styles
	type line struct {
		text  string
		extra bool
	}
	lines := []line{{text: st.section.Render("GPUS")}}
	if len(m.gpus) == 0 {
		lines = append(lines, line{text: "  none"})
	}
	nameWidth := 0
	for _, g := range m.gpus {
		nameWidth = max(nameWidth, len(g.Name))
	}
	width := m.barWidth()
	for _, g := range m.gpus {
		var held uint64
		if g.Filler != nil {
			held = min(g.Filler.HeldMiB, g.UsedMiB)
		}
		free := g.TotalMiB - min(g.UsedMiB, g.TotalMiB)
		b := st.bar(width, g.TotalMiB,
			barPart{g.UsedMiB - held, cellUsed, st.used},
			barPart{held, cellFiller, st.filler},
			barPart{min(g.FrozenMiB, free), cellFrozen, st.frozen})
		util, temp := "-", "-"
		if g.UtilPercent != nil {
			util = strconv.Itoa(*g.UtilPercent) + "%"
		}
		if g.TempC != nil {
			temp = strconv.Itoa(*g.TempC) + "C"
		}
		health := st.good.Render("ok")
		if !g.Healthy {
			health = st.bad.Render("unhealthy")
		}
		lines = append(lines, line{text: fmt.Sprintf("  %d %-*s %s %s/%s  util %s  temp %s  %s",
			g.Index, nameWidth, g.Name, b, mib(g.UsedMiB), mib(g.TotalMiB), util, temp, health)})
		var holds []string
		if f := g.Filler; f != nil {
			s := fmt.Sprintf("filler %s (%s, target %s)", mib(f.HeldMiB), f.User, mib(f.TargetMiB))
			if f.Error != "" {
				s += " error: " + f.Error
			}
			holds = append(holds, s)
		}
		if g.FrozenMiB > 0 {
			holds = append(holds, "frozen "+mib(g.FrozenMiB)+" in host RAM")
		}
		if len(g.Leases) > 0 {
			holds = append(holds, "leases "+strings.Join(g.Leases, ","))
		}
		indent := strings.Repeat(" ", 5+nameWidth)
		if len(holds) > 0 {
			lines = append(lines, line{indent + strings.Join(holds, " · "), true})
		}
		if !g.Healthy && len(g.Unhealthy) > 0 {
			lines = append(lines, line{indent + st.bad.Render(strings.Join(g.Unhealthy, "; ")), true})
		}
	}
	if len(m.gpus) > 0 {
		legend := fmt.Sprintf("%s used  %s filler  %s frozen (room a thaw needs)  %s free",
			st.used.Render(cellUsed), st.filler.Render(cellFiller), st.frozen.Render(cellFrozen), st.free.Render(cellFree))
		lines = append(lines, line{"  " + st.dim.Render(legend), true})
	}
	for _, l := range m.memoryLines() {
		lines = append(lines, line{text: l})
	}
	p := dashPane{draw: func(n int) []string {
		var out []string
		for _, l := range lines {
			if l.extra {
				if n == 0 {
					continue
				}
				n--
			}
			out = append(out, l.text)
		}
		return out
	}}
	for _, l := range lines {
		if l.extra {
			p.max++
		} else {
			p.fixed++
		}
	}
	return p
}

// memoryLines draws the host RAM held by frozen processes and the disk tier.
func (m dashModel) memoryLines() []string {
	s := m.status
	if s == nil {
		return nil
	}
	st := m.styles
	width := m.barWidth()
	ram := fmt.Sprintf("  host RAM  %s frozen, no budget", mib(s.HostMiB))
	if s.RAMBudgetMiB > 0 {
		ram = fmt.Sprintf("  host RAM  %s %s/%s frozen", st.bar(width, s.RAMBudgetMiB, barPart{s.HostMiB, cellFrozen, st.frozen}),
			mib(s.HostMiB), mib(s.RAMBudgetMiB))
	}
	var disk string
	switch {
	case s.CRIU == "" && s.DiskBytes == 0:
		disk = "  disk      off (no CRIU)"
	case s.DiskBudget > 0:
		disk = fmt.Sprintf("  disk      %s %s/%s in snapshots", st.bar(width, s.DiskBudget, barPart{s.DiskBytes, cellUsed, st.segment}),
			bytesize(s.DiskBytes), bytesize(s.DiskBudget))
	default:
		disk = fmt.Sprintf("  disk      %s in snapshots, no budget", bytesize(s.DiskBytes))
	}
	if s.CRIU == "" && s.DiskBytes > 0 {
		disk += " (disk tier off: no CRIU)"
	}
	if s.CRIU != "" { // what dumps may still write on the disk, above --disk-keep-free
		disk += " · " + bytesize(s.DiskFree-min(s.DiskFree, s.DiskKeepFree)) + " free to dumps"
	}
	return []string{ram, disk}
}

// barWidth is the cells of a bar: narrower on a narrow terminal.
func (m dashModel) barWidth() int {
	if m.width == 0 {
		return dashBarWidth
	}
	return min(max(m.width-70, 10), dashBarWidth)
}

// procPane is the process table, scrolled on a short terminal.
func (m dashModel) procPane() dashPane {
	if len(m.procs) == 0 {
		return dashFixedPane(m.styles.section.Render("PROCESSES"), "  none")
	}
	return dashPane{fixed: 2, min: min(len(m.procs), dashMinRows), max: len(m.procs), draw: m.procLines}
}

// procLines draws the process table with rows rows, scrolled so that the
// selected one shows, marked with ">".
func (m dashModel) procLines(rows int) []string {
	st := m.styles
	title := "PROCESSES"
	first := 0
	if rows < len(m.procs) {
		first = min(max(m.cursor-rows/2, 0), len(m.procs)-rows)
		title += fmt.Sprintf(" (%d-%d of %d)", first+1, first+rows, len(m.procs))
	}
	var b strings.Builder
	t := newTable(&b)
	fmt.Fprintf(t, "NAME\tSTATE\tTIER\tUSER\tGPUS\tVRAM\tAGE\n")
	for i := first; i < first+rows; i++ {
		p := &m.procs[i]
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.State, tierText(p), p.User, gpuIndexes(p.GPUs), m.vram(p), m.ageOrExit(p))
	}
	_ = t.Flush()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	out := []string{st.section.Render(title), st.dim.Render("  " + lines[0])}
	for i, l := range lines[1:] {
		if first+i == m.cursor {
			out = append(out, st.selected.Render("> "+l))
		} else {
			out = append(out, "  "+l)
		}
	}
	return out
}

// vram is a process's GPU memory; for a frozen one, the GPU memory it
// parked in host RAM ("8.0 GiB in RAM"); for a hibernated one, in
// parentheses, the GPU memory its snapshot holds, which its thaw will need
// ("(12.0 GiB) on disk").
func (m dashModel) vram(p *api.Process) string {
	if p.VRAMMiB == 0 {
		switch {
		case p.Tier == api.TierHost && p.HostMiB > 0:
			return mib(p.HostMiB) + " in RAM"
		case p.Tier == api.TierDisk && p.DiskMiB > 0:
			return "(" + mib(p.DiskMiB) + ") on disk"
		}
	}
	return procVRAM(p)
}

// ageOrExit is how long a live process has run by the snapshot's clock, or
// how an exited one ended.
func (m dashModel) ageOrExit(p *api.Process) string {
	if p.State == api.StateExited {
		return exitText(p.Exit)
	}
	start := p.StartedAt
	if start.IsZero() {
		start = p.CreatedAt
	}
	return age(m.now.Sub(start))
}

// queuePane is the unfinished jobs in submission order: the first
// dashMaxJobs, fewer on a short terminal, and how many more.
func (m dashModel) queuePane() dashPane {
	if len(m.jobs) == 0 {
		return dashFixedPane(m.styles.section.Render("QUEUE"), "  no jobs")
	}
	all := min(len(m.jobs), dashMaxJobs)
	if len(m.jobs) > dashMaxJobs {
		all++ // "… and N more"
	}
	return dashPane{fixed: 2, min: min(all, 2), max: all, draw: m.queueLines}
}

// queueLines draws the queue in n lines: the first n jobs, or the first
// n-1 and how many more.
func (m dashModel) queueLines(n int) []string {
	st := m.styles
	shown := n
	if n < len(m.jobs) {
		shown = n - 1
	}
	var b strings.Builder
	t := newTable(&b)
	fmt.Fprintf(t, "ID\tNAME\tSTATE\tVRAM\tREASON\n")
	for i := range shown {
		j := &m.jobs[i]
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", j.ID, j.Name, j.State, jobVRAM(j), orDash(j.Reason))
	}
	_ = t.Flush()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	out := []string{st.section.Render("QUEUE"), st.dim.Render("  " + lines[0])}
	for _, l := range lines[1:] {
		out = append(out, "  "+l)
	}
	if more := len(m.jobs) - shown; more > 0 {
		out = append(out, fmt.Sprintf("  … and %d more (gpuschedctl jobs)", more))
	}
	return out
}

// eventPane is the last events, newest last: fewer on a short terminal,
// never the newest.
func (m dashModel) eventPane() dashPane {
	st := m.styles
	head := []string{st.section.Render("EVENTS")}
	if m.eventsNote != "" {
		head = append(head, "  "+st.warn.Render(m.eventsNote))
	}
	if len(m.events) == 0 {
		return dashFixedPane(append(head, "  none yet")...)
	}
	return dashPane{fixed: len(head), min: min(len(m.events), dashMinRows), max: len(m.events), draw: func(n int) []string {
		out := slices.Clone(head)
		for i := len(m.events) - n; i < len(m.events); i++ {
			out = append(out, "  "+dashEventLine(&m.events[i]))
		}
		return out
	}}
}

// dashEventLine shows an event in one short line: "15:04:05 process
// train running→frozen".
func dashEventLine(e *api.Event) string {
	ts := "--:--:--"
	if !e.Time.IsZero() {
		ts = e.Time.Local().Format("15:04:05")
	}
	var what string
	switch e.Type {
	case api.EventProcess:
		what = e.Name + " " + string(e.State)
		if e.PrevState != "" {
			what = e.Name + " " + string(e.PrevState) + "→" + string(e.State)
		}
		if e.State == api.StateExited && e.Process != nil {
			what += " (" + exitText(e.Process.Exit) + ")"
		}
	case api.EventJob:
		state := e.JobState
		if state == "" && e.Job != nil {
			state = e.Job.State
		}
		what = strings.TrimSpace(e.Name + " " + string(state))
		switch {
		case e.Warning != "":
			what += ": " + e.Warning
		case e.Job != nil && e.Job.Reason != "":
			what += " (" + e.Job.Reason + ")"
		}
	case api.EventLease:
		what = e.Name
		if l := e.Lease; l != nil {
			what = l.ID + " granted to " + l.User
			if !l.ReleasedAt.IsZero() {
				what = l.ID + " released"
			}
		}
	case api.EventFiller:
		what = e.Name
		if f := e.Filler; f != nil {
			what = fmt.Sprintf("GPU %d holds %s (%s)", f.Index, mib(f.HeldMiB), f.User)
		}
	case api.EventLog:
		what = e.Name + ": " + e.Line
	default:
		what = e.Name
	}
	return fmt.Sprintf("%s %-8s %s", ts, e.Type, what)
}

// dashKeys is the key line: 80 columns at most.
const dashKeys = "f freeze · t thaw · h hibernate · k kill · ↑↓ move · r refresh · q quit · ? help"

// dashHelp is what ? adds above the status line: lines of 80 columns at
// most.
var dashHelp = []string{
	"f t h k freeze, thaw, hibernate, kill the selection; k asks y/n, others cancel.",
	"↑↓ move, PgUp/PgDn by 10, Home/End; the selection follows its process by name.",
	"Refreshed on every event and every second; r refreshes now; q or Ctrl-C quits.",
	"Bars: █ used, ▓ filler, ▒ frozen off the GPU (room a thaw needs), · free.",
}
