package daemon

import (
	"bytes"
	"errors"
	"os/exec"
	"syscall"

	"github.com/gpusched/gpusched/internal/testutil"
)

// ctlAs runs gpuschedctl as the real unprivileged user u (with its groups,
// so that it may use the socket); it returns stdout, stderr and the exit
// status.
func (h *harness) ctlAs(u testutil.User, args ...string) (string, string, int) {
	h.t.Helper()
	cmd := exec.Command(h.bins.Ctl, append([]string{"--socket", h.cfg.Socket}, args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		h.t.Fatalf("gpuschedctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}
