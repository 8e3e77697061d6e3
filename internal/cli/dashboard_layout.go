package cli

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// The dashboard's layout: the header on top and the status and key lines
// at the bottom always show, whatever the terminal's size; the panes
// between them share the lines left. Each pane first gets its few fixed
// lines and a minimum of rows, then the rest grows them in the order of
// dashGrowth. On a terminal too short for the minimums, panes give up rows
// (dashSqueeze), and only then are they cut from the bottom up.

// dashPane is one section between the header and the footer.
type dashPane struct {
	fixed    int                  // lines it always has (title, column heads)
	min, max int                  // body lines: the fewest it gives up to, and all of them
	draw     func(n int) []string // the pane with n body lines, fixed lines included
}

// Panes, top to bottom.
const (
	paneGPUs = iota
	paneProcs
	paneQueue
	paneEvents
	dashPanes
	// paneGaps stands in dashGrowth for the blank lines between sections.
	paneGaps = dashPanes
)

// dashGrowth is the order in which lines left over after every pane's
// minimum go to the panes, each up to a number of body lines (-1: all it
// has).
var dashGrowth = []struct{ pane, upTo int }{
	{paneProcs, 5},
	{paneEvents, 5},
	{paneQueue, 3},
	{paneGPUs, -1},
	{paneProcs, 10},
	{paneEvents, -1},
	{paneQueue, -1},
	{paneGaps, -1},
	{paneProcs, -1},
}

// dashGaps is the order in which the blank lines show: gap i comes before
// pane i, gap dashPanes after the last pane.
var dashGaps = []int{dashPanes, 0, 1, 2, 3}

// dashLayout fits head, panes and foot into height lines, or shows all of
// them when height is 0 (the terminal's size not yet known).
func dashLayout(height int, head []string, panes [dashPanes]dashPane, foot []string) []string {
	var rows [dashPanes]int
	gaps := len(dashGaps)
	if height > 0 {
		rows, gaps = dashAllot(height-len(head)-len(foot), panes)
	} else {
		for i, p := range panes {
			rows[i] = p.max
		}
	}
	var gap [dashPanes + 1]bool
	for _, i := range dashGaps[:gaps] {
		gap[i] = true
	}
	var body []string
	for i, p := range panes {
		if gap[i] {
			body = append(body, "")
		}
		body = append(body, p.draw(rows[i])...)
	}
	if gap[dashPanes] {
		body = append(body, "")
	}
	if height <= 0 {
		return append(append(head, body...), foot...)
	}
	// Shorter than the panes' minimums: cut them from the bottom up, then
	// the header, so that the status and key lines stay.
	body = body[:min(len(body), max(height-len(head)-len(foot), 0))]
	lines := append(append(head, body...), foot...)
	return lines[max(len(lines)-height, 0):]
}

// dashSqueeze is the order in which panes with as many body lines give
// one up when even the minimums do not fit.
var dashSqueeze = []int{paneQueue, paneEvents, paneProcs}

// dashAllot shares avail lines among panes: each one's body lines, and how
// many of the gaps around them show. When the minimums do not fit, the
// pane with the most body lines gives one up, again and again, down to one
// line each.
func dashAllot(avail int, panes [dashPanes]dashPane) (rows [dashPanes]int, gaps int) {
	left := avail
	for i, p := range panes {
		rows[i] = p.min
		left -= p.fixed + p.min
	}
	for left < 0 {
		most := dashSqueeze[0]
		for _, i := range dashSqueeze {
			if rows[i] > rows[most] {
				most = i
			}
		}
		if rows[most] <= 1 {
			break
		}
		rows[most]--
		left++
	}
	for _, g := range dashGrowth {
		if g.pane == paneGaps {
			gaps = min(len(dashGaps), max(left, 0))
			left -= gaps
			continue
		}
		p := &panes[g.pane]
		upTo := p.max
		if g.upTo >= 0 {
			upTo = min(g.upTo, p.max)
		}
		add := min(max(upTo-rows[g.pane], 0), max(left, 0))
		rows[g.pane] += add
		left -= add
	}
	return rows, gaps
}

// wrap breaks s into lines of the terminal's width at spaces where it can,
// at most most lines, the last ending in "…" when s is longer; each line is
// drawn with render.
func (m dashModel) wrap(s string, most int, render func(...string) string) []string {
	lines := []string{s}
	if m.width > 0 {
		lines = strings.Split(ansi.Wrap(s, m.width, ""), "\n")
	}
	if len(lines) > most {
		lines = lines[:most]
		lines[most-1] = ansi.Truncate(lines[most-1], m.width-1, "") + "…"
	}
	for i, l := range lines {
		lines[i] = render(l)
	}
	return lines
}
