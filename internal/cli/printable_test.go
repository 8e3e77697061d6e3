package cli

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want, lines string }{
		{"plain text, café, 中文, 🙂", "plain text, café, 中文, 🙂", "plain text, café, 中文, 🙂"},
		{"a\x1b[2Jb", `a\e[2Jb`, `a\e[2Jb`},
		{"line\rover", `line\rover`, `line\rover`},
		{"tab\tnew\nline", `tab\tnew\nline`, "tab\tnew\nline"},
		{"title\x1b]0;x\a", `title\e]0;x\a`, `title\e]0;x\a`},
		{"nul\x00del\x7f", `nul\x00del\x7f`, `nul\x00del\x7f`},
		{"c1 csi \u009b2J", `c1 csi \u009b2J`, `c1 csi \u009b2J`},
		{"rtl \u202eexe.txt", `rtl \u202eexe.txt`, `rtl \u202eexe.txt`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`, `bad \xff\xfe utf8`},
	} {
		if got := printable(tc.in); got != tc.want {
			t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := printableLines(tc.in); got != tc.lines {
			t.Errorf("printableLines(%q) = %q, want %q", tc.in, got, tc.lines)
		}
	}
}

// TestShellQuoteReadsBack: an argument shown by cmdline is the same
// argument to bash, whatever its bytes, and the shown text holds no
// control character.
func TestShellQuoteReadsBack(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", " ", "'", `\`, "\"", "$", "\x1b", "\r", "\n", "\t", "\a", "\x00", "\x7f", "é", "\u009b", "\u202e", "\xff", "!", "*", "-"}
	args := []string{"", "plain", "it's", `back\slash`}
	for range 200 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		args = append(args, b.String())
	}
	// bash cannot pass a NUL in an argument: printf %q of one shows its
	// end. Compare each argument up to its first NUL.
	var script strings.Builder
	for _, a := range args {
		shown := shellQuote(a)
		for _, c := range []byte(shown) {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("shellQuote(%q) = %q holds the control byte %#x", a, shown, c)
			}
		}
		script.WriteString("printf '%s\\0' " + shown + "\n")
	}
	out, err := exec.Command("bash", "-c", script.String()).Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(args) {
		t.Fatalf("bash printed %d arguments, want %d", len(got), len(args))
	}
	for i, a := range args {
		if before, _, _ := strings.Cut(a, "\x00"); got[i] != before {
			t.Errorf("bash reads shellQuote(%q) = %s as %q", a, shellQuote(a), got[i])
		}
	}
}

// TestSafeWriterKeepsJSON: JSON through safeWriter decodes to what was
// encoded; the characters a terminal acts on are escaped in it.
func TestSafeWriterKeepsJSON(t *testing.T) {
	in := api.Process{Name: "evil", Cmd: []string{"x\x1b[2J\r\u009b\u202e\t\n", "ok"}}
	var buf bytes.Buffer
	if err := json.NewEncoder(safeWriter{&buf}).Encode(in); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(buf.String(), "\u009b\u202e\x1b\r") {
		t.Fatalf("raw controls in %q", buf.String())
	}
	var out api.Process
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.Cmd[0] != in.Cmd[0] {
		t.Fatalf("decoded %q (%v), want %q", out.Cmd, err, in.Cmd)
	}
}

// TestLogsAreRawEverythingElseEscaped: logs prints the process's lines as
// they are (as cat shows a file); the same bytes in a status are escaped.
func TestLogsAreRawEverythingElseEscaped(t *testing.T) {
	p := proc("p")
	p.Cmd = []string{"echo", "\x1b[8m"}
	p.Error = "failed \x1b[2J"
	d := newFakeDaemon(t, map[string]handler{
		api.MethodLogs:   answer(result(api.LogsResult{Name: "p", Lines: []string{"\x1b[32mgreen\x1b[0m"}})),
		api.MethodStatus: answer(result(p)),
	})
	out, _, code := ctl(t, d, "logs", "p")
	if code != 0 || out != "\x1b[32mgreen\x1b[0m\n" {
		t.Errorf("logs printed %q (exit %d); want the line as it is", out, code)
	}
	out, _, code = ctl(t, d, "status", "p")
	if code != 0 || strings.Contains(out, "\x1b") || !strings.Contains(out, `$'\e[8m'`) || !strings.Contains(out, `failed \e[2J`) {
		t.Errorf("status printed %q (exit %d); want the command and error escaped", out, code)
	}
}

// TestDashboardShowsUsersTextEscaped: what a user's job or process chose
// reaches the dashboard escaped, not as controls of its terminal.
func TestDashboardShowsUsersTextEscaped(t *testing.T) {
	job := queuedJob("evil")
	job.Reason = "waiting\r\x1b[2J\x1b]0;PWNED\a"
	src := &fakeDashSource{jobs: []api.Job{job}, status: &api.Status{Version: "1", Backend: "sim"},
		events: []api.Event{{Type: api.EventJob, Name: "evil", JobState: api.JobQueued, Warning: "bad \x1b[8mhidden"}}}
	m := newTestDash(scrubbed{src})
	m, _ = step(t, m, m.load()())
	if err := (scrubbed{src}).Events(t.Context(), func(e *api.Event) error {
		m, _ = step(t, m, dashEventMsg{event: *e})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	view := m.render()
	if strings.ContainsAny(view, "\x1b\r\a") {
		t.Fatalf("the view holds a user's controls:\n%q", view)
	}
	for _, want := range []string{`waiting\r\e[2J\e]0;PWNED\a`, `bad \e[8mhidden`} {
		if !strings.Contains(view, want) {
			t.Errorf("the view lacks %q:\n%s", want, view)
		}
	}
}
