package daemon

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestCallerChecksHoldNoThreadForEver: a real user's runs whose --dir lies
// on a file system that never answers (testutil.StallDir, standing in for
// the user's own FUSE mount) are answered within callerCheckWait with
// timeout, while each check still holds a thread of the daemon; past
// callerChecksPerUser such checks the user's next run is refused with
// resource_exhausted instead of taking one more thread, another user's runs
// go on, and once the file system answers the user's run again. Before,
// each such run waited for ever, and a user could pile up the daemon's
// threads, one a call, until the Go runtime aborted it. It runs in a mount
// namespace of its own: the FUSE mount would fail other tests' CRIU dumps.
func TestCallerChecksHoldNoThreadForEver(t *testing.T) {
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	u := testutil.NewUser(t, "gsstall1", "gsstall")
	other := testutil.NewUser(t, "gsstall2", "gsstall")
	mnt, release := testutil.StallDir(t)
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	t.Cleanup(release) // first: the checks return, and the daemon can stop
	h.start()
	dir := filepath.Join(mnt, "stall", "x")
	outs := make([]string, callerChecksPerUser)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = ctlAsBounded(h, u, "run", fmt.Sprintf("stalled-%d", i), "--dir", dir, "--", "true")
		}()
	}
	wg.Wait()
	for _, out := range outs {
		if !strings.Contains(out, "no answer from the file system") || !strings.Contains(out, "(timeout)") {
			t.Fatalf("a run with its dir on a stalled file system: %s; want a timeout", out)
		}
	}
	if out := ctlAsBounded(h, u, "run", "next", "--dir", dir, "--", "true"); !strings.Contains(out, "(resource_exhausted)") {
		t.Fatalf("a run with %d checks stalled: %s; want resource_exhausted", callerChecksPerUser, out)
	}
	if _, errOut, code := h.ctlAs(other, "run", "theirs", "--dir", "/", "--", "true"); code != 0 {
		t.Fatalf("another user's run: %s", errOut)
	}
	release()
	if _, errOut, code := h.ctlAs(u, "run", "after", "--dir", "/", "--", "true"); code != 0 {
		t.Fatalf("the user's run once the file system answers: %s", errOut)
	}
}

// ctlAsBounded runs gpuschedctl as u for at most a minute, from any
// goroutine, and returns its exit status and standard error in one string.
func ctlAsBounded(h *harness, u testutil.User, args ...string) string {
	cmd := exec.Command("timeout", append([]string{"60", h.bins.Ctl, "--socket", h.cfg.Socket}, args...)...)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	return fmt.Sprintf("%v: %s", err, errb.String())
}
