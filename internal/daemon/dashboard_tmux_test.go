package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// dashKeyLine starts the dashboard's key line.
const dashKeyLine = "f freeze · t thaw · h hibernate · k kill"

// TestDashboardInATerminal runs the real gpuschedctl dashboard in a real
// terminal of 80x24 and of 120x40 (tmux) against the daemon on simulated
// GPUs, with more processes, jobs and events than a small screen holds:
// the title, the newest event and the key line show, k shows the kill
// question on the status line, and only the y after it kills.
func TestDashboardInATerminal(t *testing.T) {
	tmux := needTmux(t)
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			h := newHarness(t)
			// alpha sorts first, so the dashboard selects it.
			names := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"}
			for i, n := range names {
				if _, err := h.client().Run(ctxT(t), api.RunParams{Name: n, Dir: "/", GPU: &api.GPURef{Index: i % 2},
					Cmd: []string{h.bins.SimJob, "--vram", "2000", "--tick", "1"}, Env: map[string]string{"PATH": os.Getenv("PATH")}}); err != nil {
					t.Fatalf("run %s: %v", n, err)
				}
				h.followCount(n, "simjob: allocated", 1)
			}
			// Two GPUs of 23 GiB: it waits while alpha holds GPU 0.
			if _, err := h.client().Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "zulu", Dir: "/",
				Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 23 << 10}, GPUs: 2}}); err != nil {
				t.Fatal(err)
			}

			scr := startTmux(t, tmux, size[0], size[1], h.bins.Ctl, "--socket", h.cfg.Socket, "dashboard")
			scr.waitFor("the dashboard with its queue", func(s string) bool {
				return strings.Contains(s, "PROCESSES") && strings.Contains(s, "zulu")
			})
			h.waitEventSubscriber()

			// Ten events, more than an 80x24 screen has room for.
			for _, n := range names[1:] {
				if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: n}); err != nil {
					t.Fatalf("freeze %s: %v", n, err)
				}
			}
			screen := scr.waitFor("the newest event", func(s string) bool { return strings.Contains(s, "foxtrot freezing→frozen") })
			lines := strings.Split(screen, "\n")
			if !strings.HasPrefix(lines[0], "gpusched ") {
				t.Errorf("the first line is %q, not the title:\n%s", lines[0], screen)
			}
			if !strings.Contains(screen, "\n"+dashKeyLine) {
				t.Errorf("no key line:\n%s", screen)
			}

			// k asks on the status line; alpha lives until the y.
			scr.keys("k")
			scr.waitFor("the kill question", func(s string) bool { return strings.Contains(s, "\nkill alpha? y/n\n"+dashKeyLine) })
			if p, err := h.client().Process(ctxT(t), "alpha"); err != nil || p.State != api.StateRunning {
				t.Fatalf("alpha after k: %+v, %v; want it running until y", p, err)
			}
			scr.keys("y")
			scr.waitFor("the kill's outcome", func(s string) bool { return strings.Contains(s, "\nkilled alpha: exited") })
			if p, err := h.client().Process(ctxT(t), "alpha"); err != nil || p.State != api.StateExited {
				t.Errorf("alpha after y: %+v, %v; want it exited", p, err)
			}
		})
	}
}

// needTmux is the tmux binary. Where it is missing the test skips, but not
// under CI ($CI set), where scripts/test-deps.sh must have installed it.
func needTmux(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tmux")
	switch {
	case err == nil:
		return path
	case os.Getenv("CI") != "":
		t.Fatalf("tmux is missing under CI; scripts/test-deps.sh installs it: %v", err)
	default:
		t.Skip("needs tmux to run the dashboard in a real terminal: apt-get install tmux (scripts/test-deps.sh does)")
	}
	return ""
}

// waitEventSubscriber waits until some client is subscribed to events.
func (h *harness) waitEventSubscriber() {
	h.t.Helper()
	dashPoll(h.t, "an events subscriber", func() (bool, string) {
		h.d.events.mu.Lock()
		defer h.d.events.mu.Unlock()
		return len(h.d.events.subs) > 0, "no subscriber"
	})
}

// tmuxScreen is a terminal of a fixed size, on a tmux server of its own,
// running one command.
type tmuxScreen struct {
	t      *testing.T
	tmux   string
	socket string
	w, h   int
}

// startTmux runs argv in a w x h terminal; the server ends with t.
func startTmux(t *testing.T, tmux string, w, h int, argv ...string) *tmuxScreen {
	t.Helper()
	s := &tmuxScreen{t: t, tmux: tmux, socket: filepath.Join(testutil.ShortDir(t), "tmux"), w: w, h: h}
	s.run(append([]string{"new-session", "-d", "-s", "dash", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h), "--"}, argv...)...)
	t.Cleanup(func() { _ = s.command("kill-server").Run() })
	if got := strings.TrimSpace(s.run("display-message", "-p", "-t", "dash", "#{pane_width}x#{pane_height}")); got != fmt.Sprintf("%dx%d", w, h) {
		t.Fatalf("the terminal is %s, want %dx%d", got, w, h)
	}
	return s
}

// command is a tmux command on s's server: UTF-8, no configuration file.
func (s *tmuxScreen) command(args ...string) *exec.Cmd {
	cmd := exec.Command(s.tmux, append([]string{"-u", "-f", "/dev/null", "-S", s.socket}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TERM=xterm-256color", "LANG=C.UTF-8"}
	return cmd
}

// run runs a tmux command and returns its output; it fails t on error.
func (s *tmuxScreen) run(args ...string) string {
	s.t.Helper()
	out, err := s.command(args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys types keys into the terminal.
func (s *tmuxScreen) keys(keys ...string) {
	s.t.Helper()
	s.run(append([]string{"send-keys", "-t", "dash"}, keys...)...)
}

// waitFor polls the screen until ok holds for it and returns it; it fails
// t with the last screen after a minute.
func (s *tmuxScreen) waitFor(what string, ok func(screen string) bool) string {
	s.t.Helper()
	var screen string
	dashPoll(s.t, fmt.Sprintf("%s on the %dx%d terminal", what, s.w, s.h), func() (bool, string) {
		screen = s.run("capture-pane", "-p", "-t", "dash")
		return ok(screen), "the screen:\n" + screen
	})
	return screen
}

// dashPoll polls cond until it holds, failing t after 60 seconds with
// what and cond's last note.
func dashPoll(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, note := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute; %s", what, note)
		}
		<-tick.C
	}
}
