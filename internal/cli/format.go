package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// writeJSON prints raw as one compact line.
func writeJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return fmt.Errorf("daemon sent invalid JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// newTable returns a writer that aligns tab-separated columns; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// mib shows a MiB count as "512 MiB" or "12.0 GiB".
func mib(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d MiB", n)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/1024)
}

// bytesize shows a byte count with a binary unit: "512 B", "14.0 MiB",
// "1.5 GiB".
func bytesize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// age shows a duration coarsely: "45s", "12m", "3h12m", "2d3h".
func age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return withRest(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	default:
		return withRest(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
	}
}

// withRest writes "3h12m", or "3h" when the smaller unit is zero.
func withRest(big int, bigUnit string, small int, smallUnit string) string {
	if small == 0 {
		return strconv.Itoa(big) + bigUnit
	}
	return strconv.Itoa(big) + bigUnit + strconv.Itoa(small) + smallUnit
}

// since shows a point in time as local time plus how long ago it was.
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format("2006-01-02 15:04:05"), age(time.Since(t)))
}

// exitText shows how a process ended: "exit 0", "signal SIGKILL", "unknown".
func exitText(e *api.Exit) string {
	switch {
	case e == nil || e.Unknown:
		return "unknown"
	case e.Signal != "":
		return "signal " + e.Signal
	case e.Code != nil:
		return "exit " + strconv.Itoa(*e.Code)
	}
	return "unknown"
}

// summary is a one-line account of a process: "train: running, pid 42".
func summary(p *api.Process) string {
	if p.State == api.StateExited {
		return fmt.Sprintf("%s: %s, %s", p.Name, p.State, exitText(p.Exit))
	}
	if p.PID > 0 {
		return fmt.Sprintf("%s: %s, pid %d", p.Name, p.State, p.PID)
	}
	return fmt.Sprintf("%s: %s", p.Name, p.State)
}

// gpuIndexes lists a process's GPUs as "0,1", or "-" for none.
func gpuIndexes(gs []api.ProcessGPU) string {
	if len(gs) == 0 {
		return "-"
	}
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = strconv.Itoa(g.Index)
	}
	return strings.Join(s, ",")
}

// cmdline joins an argv the way a shell would read it back.
func cmdline(argv []string) string {
	s := make([]string, len(argv))
	for i, a := range argv {
		s[i] = shellQuote(a)
	}
	return strings.Join(s, " ")
}

// listedCmd is a listed command as cmdline shows it, ending in "…" when
// the listing cut it (cmd_truncated).
func listedCmd(argv []string, truncated bool) string {
	if truncated {
		return cmdline(argv) + "…"
	}
	return cmdline(argv)
}

// shellQuote single-quotes a when a shell would not read it literally,
// and writes it as bash's $'...' with escapes when it holds characters a
// terminal would act on (printable).
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return a
	}
	if !clean(a, false) {
		var b strings.Builder
		writeEscaped(&b, strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(a), false)
		return "$'" + b.String() + "'"
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// who shows an identity as "alice (uid 1000, gid 1000)".
func who(user string, uid, gid uint32) string {
	ids := fmt.Sprintf("uid %d, gid %d", uid, gid)
	if user == "" {
		return ids
	}
	return fmt.Sprintf("%s (%s)", user, ids)
}
