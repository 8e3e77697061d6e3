package daemon

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The per-user cap tests (issue 20): real unprivileged users of the
// socket's group.
const (
	quoGroup = "gsquo"   // the socket's group
	quoAlice = "gsquo-a" // the user held to the caps
	quoBob   = "gsquo-b" // another user, unaffected by alice's
)

// ctlResult is one gpuschedctl call's outcome.
type ctlResult struct {
	stdout, stderr string
	code           int
	err            error // it could not be run at all
}

// ctlConcurrently runs gpuschedctl as u once per argument list, all at
// once, and returns each call's outcome in order.
func (h *harness) ctlConcurrently(u testutil.User, argss ...[]string) []ctlResult {
	h.t.Helper()
	out := make([]ctlResult, len(argss))
	var wg sync.WaitGroup
	for i, args := range argss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(h.bins.Ctl, append([]string{"--socket", h.cfg.Socket}, args...)...)
			cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			err := cmd.Run()
			r := ctlResult{stdout: so.String(), stderr: se.String()}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				r.code = ee.ExitCode()
			} else {
				r.err = err
			}
			out[i] = r
		}()
	}
	wg.Wait()
	for i, r := range out {
		if r.err != nil {
			h.t.Fatalf("gpuschedctl %v as %s: %v", argss[i], u.Name, r.err)
		}
	}
	return out
}

// wantExhausted checks that a refused gpuschedctl call said
// resource_exhausted in a sentence naming the user and --flag.
func wantExhausted(t *testing.T, what, stderr string, code int, user, flag string) {
	t.Helper()
	if code == 0 || !strings.Contains(stderr, string(api.CodeResourceExhausted)) || !strings.Contains(stderr, user) || !strings.Contains(stderr, "--"+flag) {
		t.Errorf("%s: exit %d, stderr %q; want resource_exhausted naming %s and --%s", what, code, stderr, user, flag)
	}
}

// liveOf counts uid's managed processes that have not exited.
func (h *harness) liveOf(uid uint32) int {
	n := 0
	for _, r := range h.d.table.View().Records {
		if r.Owner.UID == uid && r.Live() {
			n++
		}
	}
	return n
}
