package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDiskTierRefusalIsClear: a real unprivileged user's process that
// holds something CRIU cannot image or restore is refused by hibernate and
// fork with a sentence that says what, as unavailable, not CRIU's log
// lines as internal; hibernate leaves it frozen in RAM, fork running.
// The holdings: a connection to the daemon's own socket, as a script using
// the SDK has, and a file of a thread's /proc directory or of the host's
// /proc (as a simulated job reads its start time), which CRIU would image
// but could never reopen on restore.
func TestDiskTierRefusalIsClear(t *testing.T) {
	u := testutil.NewUser(t, "gsfr1", "gsfr")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsfr" })
	for _, tc := range []struct {
		name, script, says string
	}{
		{"sdkuser", `import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print("ready", flush=True)
while True:
    time.sleep(1)`, "Unix socket"},
		{"threadfile", `import threading, time
def hold():
    f = open("/proc/thread-self/comm")
    print("ready", flush=True)
    while True:
        time.sleep(1)
threading.Thread(target=hold).start()`, "in the /proc directory of one of its threads"},
		{"hostproc", fmt.Sprintf(`import time
f = open(%q + "/self/timens_offsets")
print("ready", flush=True)
while True:
    time.sleep(1)`, h.d.simHostProc()), "in the host's /proc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, errOut, code := h.ctlAs(u, "run", tc.name, "--", "/usr/bin/python3", "-c", tc.script, h.cfg.Socket); code != 0 {
				t.Fatal(errOut)
			}
			h.followCount(tc.name, "ready", 1)
			for _, c := range []struct {
				args  []string
				state api.State
			}{
				{[]string{"fork", tc.name, "--copies", "1"}, api.StateRunning},
				{[]string{"hibernate", tc.name}, api.StateFrozen},
			} {
				_, errOut, code := h.ctlAs(u, c.args...)
				if code != 1 || !strings.Contains(errOut, "("+string(api.CodeUnavailable)+")") ||
					!strings.Contains(errOut, tc.says) || strings.Contains(errOut, "Error (") {
					t.Fatalf("%v: exit %d, %q; want a clear unavailable", c.args, code, errOut)
				}
				if p := h.proc(tc.name); p.State != c.state {
					t.Fatalf("after %v: %s, want %s", c.args, p.State, c.state)
				}
			}
		})
	}
}
