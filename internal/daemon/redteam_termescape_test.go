package daemon

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// termAttack is an argument that, printed raw to a terminal, goes back to
// the start of the line and up one, erases it, writes a line of its own,
// sets the window's title and hides all that follows.
const termAttack = "x\r\x1b[1A\x1b[2Kroot  running  -  1  root  -  -  1s  /usr/bin/true\x1b]0;PWNED\a\x1b[8m\u202e"

// TestRedTeamCommandCannotDriveRootsTerminal: a real user's `run` with an
// argument of terminal controls; root's `status` and `ps -a` showed it
// raw (2026-11-28: `status` wrote the ESC and CR bytes as they
// were), so that the user's process rewrote what root's terminal showed.
// Now gpuschedctl prints no control character but its own newlines and
// tabs, and the command reads back: bash given the argument as shown
// gets the argument as it was.
func TestRedTeamCommandCannotDriveRootsTerminal(t *testing.T) {
	u := testutil.NewUser(t, "gsterm", "gstermg")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	root := testutil.User{Name: "root"}
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "evil", "--", "/bin/sleep", "1000", termAttack); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	for _, args := range [][]string{{"status", "evil"}, {"ps", "-a"}, {"ps", "-a", "--json"}, {"status", "evil", "--json"}} {
		out, errOut, code := h.ctlAs(root, args...)
		if code != 0 {
			t.Fatalf("%v: %s", args, errOut)
		}
		for _, b := range []byte(out + errOut) {
			if (b < 0x20 && b != '\n' && b != '\t') || b == 0x7f {
				t.Fatalf("root's %v printed the control byte %#x:\n%q", args, b, out)
			}
		}
		if strings.Contains(out, "\u202e") {
			t.Fatalf("root's %v printed a right-to-left override:\n%q", args, out)
		}
	}
	out, _, _ := h.ctlAs(root, "status", "evil")
	i := strings.Index(out, "$'")
	if i < 0 {
		t.Fatalf("status shows the argument as %q; want bash's $'...'", out)
	}
	shown := strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
	got, err := exec.Command("bash", "-c", `printf %s `+shown).Output()
	if err != nil || string(got) != termAttack {
		t.Fatalf("bash reads the argument shown, %s, as %q (%v); want %q", shown, got, err, termAttack)
	}
	js, _, _ := h.ctlAs(root, "status", "evil", "--json")
	var p api.Process
	if err := json.Unmarshal([]byte(js), &p); err != nil || len(p.Cmd) != 3 || p.Cmd[2] != termAttack {
		t.Fatalf("--json decodes as %q (%v); want the argument %q", p.Cmd, err, termAttack)
	}
}

// TestRedTeamLogsCannotDriveRootsTerminal: a real user's process writes a
// line that, raw, overwrites itself on a terminal ("secret", then a
// carriage return and "SPOOF!"). Root's `logs` of it on a terminal (tmux)
// shows the line escaped; with --raw, or into a pipe, as it was written.
func TestRedTeamLogsCannotDriveRootsTerminal(t *testing.T) {
	tmux := needTmux(t)
	u := testutil.NewUser(t, "gstermlog", "gstermlogg")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "noisy", "--", "/usr/bin/printf", `secret\rSPOOF!\n`); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	h.waitExit("noisy")
	if out, _, _ := h.ctlAs(testutil.User{Name: "root"}, "logs", "noisy"); out != "secret\rSPOOF!\n" {
		t.Fatalf("root's logs into a pipe: %q; want the line as it was written", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "noisy"}, `secret\rSPOOF!`},
		{[]string{"logs", "--raw", "noisy"}, "SPOOF!"},
	} {
		scr := startTmux(t, tmux, 80, 10, "/bin/sh", "-c", strings.Join(append([]string{h.bins.Ctl, "--socket", h.cfg.Socket}, tc.args...), " ")+"; echo END; sleep 600")
		screen := scr.waitFor("the log and END", func(s string) bool { return strings.Contains(s, "END") })
		if first := strings.SplitN(screen, "\n", 2)[0]; first != tc.want {
			t.Errorf("root's %v on a terminal shows %q; want %q", tc.args, first, tc.want)
		}
		_ = scr.command("kill-server").Run()
	}
}
