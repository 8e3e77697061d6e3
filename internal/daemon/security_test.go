package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// asUser runs gpuschedctl as an unprivileged user; it returns stdout,
// stderr and the exit status.
func (h *harness) asUser(u *user.User, args ...string) (string, string, int) {
	h.t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command(h.bins.Ctl, append([]string{"--socket", h.cfg.Socket}, args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("gpuschedctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// nobodyUser is the unprivileged user the security tests act as, with its
// group (given the socket so that it may connect); skips without one.
func nobodyUser(t *testing.T) (*user.User, *user.Group) {
	t.Helper()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	group, err := user.LookupGroupId(nobody.Gid)
	if err != nil {
		t.Skip("no group for nobody")
	}
	return nobody, group
}

// TestNonRootCallers checks the security model with a real unprivileged
// user: it sees and acts only on its own processes, and what it runs is
// owned by it.
func TestNonRootCallers(t *testing.T) {
	nobody, group := nobodyUser(t)
	h := newHarness(t, func(c *config.Config) { c.Group = group.Name })
	h.run("rootjob", "sleep", "1000")

	// It cannot see root's process...
	out, errOut, code := h.asUser(nobody, "--json", "ps")
	var ps []api.Process
	if code != 0 || json.Unmarshal([]byte(out), &ps) != nil {
		if err := json.Unmarshal([]byte(out), &struct{ Processes *[]api.Process }{&ps}); err != nil || code != 0 {
			t.Fatalf("ps as nobody: %q %q (exit %d)", out, errOut, code)
		}
	}
	if len(ps) != 0 {
		t.Fatalf("nobody sees %+v", ps)
	}
	// ...nor act on it: named as root's (USER/NAME) it is refused; by its
	// name alone it is nobody's own, which does not exist.
	for _, args := range [][]string{
		{"kill", "root/rootjob"},
		{"kill", "--signal", "KILL", "root/rootjob"},
		{"status", "root/rootjob"},
		{"logs", "root/rootjob"},
		{"wait", "root/rootjob"},
		{"rm", "root/rootjob"},
		{"kill", "0/rootjob"},
	} {
		_, stderr, code := h.asUser(nobody, args...)
		if code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
			t.Errorf("%v as nobody: exit %d, stderr %q; want permission_denied", args, code, stderr)
		}
	}
	for _, args := range [][]string{{"kill", "rootjob"}, {"status", "rootjob"}} {
		_, stderr, code := h.asUser(nobody, args...)
		if code == 0 || !strings.Contains(stderr, string(api.CodeNotFound)) {
			t.Errorf("%v as nobody: exit %d, stderr %q; want not_found", args, code, stderr)
		}
	}
	if p, _ := h.client().Process(ctxT(t), "rootjob"); p.State != api.StateRunning {
		t.Fatalf("root's process was touched: %+v", p)
	}
	// Privileged requests are refused.
	for _, args := range [][]string{
		{"run", "--user", "root", "escalate", "--", "id"},
		{"run", "--nice", "-5", "greedy", "--", "id"},
	} {
		if _, stderr, code := h.asUser(nobody, args...); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
			t.Errorf("%v as nobody: exit %d, stderr %q; want permission_denied", args, code, stderr)
		}
	}

	// What it runs is its own, all the way down the tree.
	if _, stderr, code := h.asUser(nobody, "run", "--dir", "/", "mine", "--", "sh", "-c", "echo ready; exec sleep 1000"); code != 0 {
		t.Fatalf("run as nobody: %s", stderr)
	}
	h.followUntil("mine", "ready")
	p, err := h.client().Process(ctxT(t), "mine")
	if err != nil {
		t.Fatal(err)
	}
	if strconv.Itoa(int(p.UID)) != nobody.Uid || p.User != "nobody" {
		t.Fatalf("record owner %d/%s, want nobody", p.UID, p.User)
	}
	for _, pid := range []int{p.InitPID, p.PID} {
		if uids := procUIDs(t, pid); uids != strings.Repeat(nobody.Uid+"\t", 3)+nobody.Uid {
			t.Errorf("pid %d runs with uids %q, want all %s", pid, uids, nobody.Uid)
		}
	}
	out, _, _ = h.asUser(nobody, "ps")
	if !strings.Contains(out, "mine") || strings.Contains(out, "rootjob") {
		t.Fatalf("nobody's ps:\n%s", out)
	}
	if _, stderr, code := h.asUser(nobody, "kill", "mine"); code != 0 {
		t.Fatalf("nobody could not kill its own process: %s", stderr)
	}
	// Root may run a process as another user; that user then owns it.
	delegated, err := h.client().Run(ctxT(t), api.RunParams{Name: "delegated", User: "nobody", Dir: "/", Cmd: []string{"sleep", "1000"},
		Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if uids := procUIDs(t, delegated.PID); uids != strings.Repeat(nobody.Uid+"\t", 3)+nobody.Uid {
		t.Errorf("root's run as nobody has uids %q", uids)
	}
	if out, _, _ := h.asUser(nobody, "ps"); !strings.Contains(out, "delegated") {
		t.Errorf("nobody does not see the process root ran as nobody:\n%s", out)
	}
	// Root sees everything.
	all, _ := h.client().PS(ctxT(t), api.PSParams{})
	if len(all) != 3 {
		t.Fatalf("root sees %d processes, want 3", len(all))
	}
}

// procUIDs returns the Uid: line of /proc/pid/status (real, effective,
// saved, fs).
func procUIDs(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
