package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/testutil"
)

// spyReader passes reads to a real log reader and keeps what it was asked
// and answered.
type spyReader struct {
	real    logReader
	mu      sync.Mutex
	callers []logreader.Cgroups
	cpus    []string
	apart   int // reads a reader answered
}

func (s *spyReader) Read(ctx context.Context, caller logreader.Cgroups, cpus string, req logreader.Request) ([]byte, error) {
	b, err := s.real.Read(ctx, caller, cpus, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callers, s.cpus = append(s.callers, caller), append(s.cpus, cpus)
	if err == nil {
		s.apart++
	}
	return b, err
}

func (s *spyReader) seen() (calls, apart int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.callers), s.apart
}

// TestLogsReadInTheCallersCgroups: a real user's `logs -n -1`, sent from a
// process in a cgroup apart from the daemon's, is answered by a log reader
// placed in that cgroup and on that process's CPUs (taskset), with the
// lines the daemon would give; the default
// 100 lines are the daemon's own to read, and so is a large call from the
// daemon's own cgroups, which never reaches a reader.
func TestLogsReadInTheCallersCgroups(t *testing.T) {
	u := testutil.NewUser(t, "gslogsap", "gslogsapg")
	const lines = 10000
	h, spy := talkerWithSpy(t, u, lines)
	own, err := logreader.Of(os.Getpid())
	if err != nil || own.Unified == "" {
		t.Skipf("no unified cgroup hierarchy to put the caller in (%+v, %v)", own, err)
	}
	dir := filepath.Join(own.Unified, "gslogsap-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	_, pinned := testutil.CPUsApart(t)
	out := h.ctlInCgroupOn(u, dir, pinned, "logs", "-n", "-1", "talker")
	if out != seqOutput(lines) {
		t.Fatalf("logs -n -1 from the user's cgroup: %d bytes, want seq's %d", len(out), len(seqOutput(lines)))
	}
	if calls, apart := spy.seen(); calls != 1 || apart != 1 || spy.callers[0].Unified != dir || spy.cpus[0] != pinned {
		t.Fatalf("%d reads, %d by a reader, callers %+v on CPUs %q; want one, by a reader in %s on CPUs %s", calls, apart, spy.callers, spy.cpus, dir, pinned)
	}
	if out := h.ctlInCgroup(u, dir, "logs", "talker"); out != seqOutput(lines)[len(seqOutput(lines-100)):] {
		t.Fatalf("logs from the user's cgroup: %q", out)
	}
	if calls, _ := spy.seen(); calls != 1 {
		t.Fatalf("the default 100 lines went to a reader (%d reads)", calls)
	}
	if out, errOut, code := h.ctlAs(u, "logs", "-n", "-1", "talker"); code != 0 || out != seqOutput(lines) {
		t.Fatalf("logs -n -1 from the daemon's cgroup: %d bytes, %s", len(out), errOut)
	}
	if calls, _ := spy.seen(); calls != 1 {
		t.Fatalf("%d reads; want the call from the daemon's cgroup left to the daemon before any", calls)
	}
}

// ctlInCgroup runs gpuschedctl as u, started in the cgroup2 directory dir
// (CLONE_INTO_CGROUP), and returns its output; it must succeed.
func (h *harness) ctlInCgroup(u testutil.User, dir string, args ...string) string {
	h.t.Helper()
	return h.ctlInCgroupOn(u, dir, "", args...)
}

// ctlInCgroupOn is ctlInCgroup with the client confined to cpus (a CPU
// list) by taskset(1); "": not confined.
func (h *harness) ctlInCgroupOn(u testutil.User, dir, cpus string, args ...string) string {
	h.t.Helper()
	argv := append([]string{h.bins.Ctl, "--socket", h.cfg.Socket}, args...)
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()},
		UseCgroupFD: true, CgroupFD: fd}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			h.t.Fatalf("gpuschedctl %v as %s in %s: %s", args, u.Name, dir, strings.TrimSpace(errb.String()))
		}
		h.t.Fatal(err)
	}
	return out.String()
}

// talkerWithSpy starts a daemon whose log reads go through a spyReader,
// where u runs "talker", which writes seq's lines lines and sleeps, and
// waits until they are all in its log.
func talkerWithSpy(t *testing.T, u testutil.User, lines int) (*harness, *spyReader) {
	t.Helper()
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	spy := &spyReader{real: logreader.Reader{Exe: h.bins.Daemon}}
	h.opts = append(h.opts, func(d *Daemon) { d.logReader = spy })
	h.start()
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "talker", "--", "sh", "-c", "seq "+strconv.Itoa(lines)+"; exec sleep 1000"); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	p, err := h.client().Process(ctxT(t), "talker")
	if err != nil {
		t.Fatal(err)
	}
	awaitLogSize(t, p.Log, int64(len(seqOutput(lines))))
	return h, spy
}
