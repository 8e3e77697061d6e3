package daemon

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDiskTierRefusalIsClear: a real unprivileged user's process that
// holds something CRIU cannot image (here a connection to the daemon's
// own socket, as a script using the SDK does) is refused by hibernate and
// fork with a sentence that says what, as unavailable, not CRIU's log
// lines as internal; hibernate leaves it frozen in RAM, fork running.
func TestDiskTierRefusalIsClear(t *testing.T) {
	u := testutil.NewUser(t, "gsfr1", "gsfr")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsfr" })
	script := `import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print("connected", flush=True)
while True:
    time.sleep(1)`
	if _, errOut, code := h.ctlAs(u, "run", "sdkuser", "--", "/usr/bin/python3", "-c", script, h.cfg.Socket); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("sdkuser", "connected", 1)
	for _, c := range []struct {
		args  []string
		state api.State
	}{
		{[]string{"fork", "sdkuser", "--copies", "1"}, api.StateRunning},
		{[]string{"hibernate", "sdkuser"}, api.StateFrozen},
	} {
		_, errOut, code := h.ctlAs(u, c.args...)
		if code != 1 || !strings.Contains(errOut, "("+string(api.CodeUnavailable)+")") ||
			!strings.Contains(errOut, "Unix socket") || strings.Contains(errOut, "Error (") {
			t.Fatalf("%v: exit %d, %q; want a clear unavailable", c.args, code, errOut)
		}
		if p := h.proc("sdkuser"); p.State != c.state {
			t.Fatalf("after %v: %s, want %s", c.args, p.State, c.state)
		}
	}
}
