package daemon

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"syscall"

	"github.com/gpusched/gpusched/internal/testutil"
)

// ctlAs runs gpuschedctl as the real unprivileged user u (with its groups,
// so that it may use the socket); it returns stdout, stderr and the exit
// status.
func (h *harness) ctlAs(u testutil.User, args ...string) (string, string, int) {
	h.t.Helper()
	return h.ctlWith(u, nil, "", args...)
}

// ctlWith is ctlAs with groups as u's supplementary groups (u.Groups()
// when nil) and stdin as its input.
func (h *harness) ctlWith(u testutil.User, groups []uint32, stdin string, args ...string) (string, string, int) {
	h.t.Helper()
	return h.ctlLaunched(u, groups, stdin, []string{h.bins.Ctl}, args...)
}

// ctlOn is ctlAs with the client confined to cpus (a CPU list) by
// taskset(1), as a user's own would be.
func (h *harness) ctlOn(u testutil.User, cpus string, args ...string) (string, string, int) {
	h.t.Helper()
	return h.ctlLaunched(u, nil, "", []string{"taskset", "-c", cpus, h.bins.Ctl}, args...)
}

// ctlLaunched is ctlWith with gpuschedctl run by the command line argv.
func (h *harness) ctlLaunched(u testutil.User, groups []uint32, stdin string, argv []string, args ...string) (string, string, int) {
	h.t.Helper()
	if groups == nil {
		groups = u.Groups()
	}
	argv = append(append(argv[:len(argv):len(argv)], "--socket", h.cfg.Socket), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		h.t.Fatalf("gpuschedctl %v as %s: %v", args, u.Name, err)
	}
	return out.String(), errb.String(), code
}
