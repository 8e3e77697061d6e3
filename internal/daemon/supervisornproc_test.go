package daemon

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRunRefusedWhenTheUserIsAtTheDaemonsNproc: a tree's supervisor is
// forked by the daemon and made the user's before it executes, and the
// kernel refuses that execve (EAGAIN) while the user has as many
// processes as the daemon's nproc limit. The user's run is refused with
// resource_exhausted saying so; it said invalid_argument, blaming the
// supervisor binary's permissions.
func TestRunRefusedWhenTheUserIsAtTheDaemonsNproc(t *testing.T) {
	u := testutil.NewUser(t, "gsnproc1", "gsnproc")
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	h.startBinaryVia(`exec prlimit --nproc=40 -- "$@"`, "gpuschedd")
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-u", u.Name).Run() })
	shAs(t, u, "for i in $(seq 45); do sleep 100000 </dev/null >/dev/null 2>&1 & done")
	_, errOut, code := h.ctlAs(u, "run", "late", "--dir", "/", "--", "true")
	if code == 0 || !strings.Contains(errOut, string(api.CodeResourceExhausted)) || !strings.Contains(errOut, "nproc") {
		t.Fatalf("run by a user at the daemon's nproc limit: exit %d, %q; want it refused, resource_exhausted, naming nproc", code, errOut)
	}
	t.Logf("refused: %s", errOut)
}
