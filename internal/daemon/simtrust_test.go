package daemon

import (
	"bufio"
	"fmt"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The simulated GPU stands in for the driver, so it keeps the trust model:
// a user's processes affect only their own records and cannot hold up the
// daemon's work on other users' processes.

const simTrustGroup = "gspol" // the socket's group

// simUserJob runs name as u: a simulated job holding vram MiB on GPU 0.
func (h *ckptHarness) simUserJob(u testutil.User, name string, vram int) *api.Process {
	h.t.Helper()
	if _, errOut, code := h.ctlAs(u, "run", name, "--dir", "/", "--gpu", "0", "--", h.bins.SimJob, "--vram", strconv.Itoa(vram)); code != 0 {
		h.t.Fatalf("run %s as %s: %s", name, u.Name, errOut)
	}
	h.followCount(name, "simjob: allocated", 1)
	h.refresh()
	return h.proc(name)
}

// startAs starts argv as u outside the daemon, as any local user can, and
// kills it when t ends (before the daemon stops: cleanups run last first).
func startAs(t *testing.T, u testutil.User, argv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}

func osUser(t *testing.T, u testutil.User) *user.User {
	t.Helper()
	ou, err := user.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	return ou
}

// holdLocks is run as the attacker: it takes, and keeps, every lock file
// of the sim directory that it can open, then says "ready".
const holdLocks = `cd "$1" || exit 1
n=3
for f in lock locks/*; do
	[ -f "$f" ] && [ -r "$f" ] || continue
	eval "exec $n<\"\$f\""
	flock -x "$n" && echo "holding $f"
	n=$((n+1))
done
echo ready
exec sleep 600`

// TestSimLockHolderDelaysOnlyItself: user A holds every simulated GPU lock
// it can open. A freeze of user B's process is not held up; a freeze of
// A's own process fails once the daemon's bounded wait (--lock-timeout)
// is over, naming A's uid, and succeeds once A lets go.
func TestSimLockHolderDelaysOnlyItself(t *testing.T) {
	a := testutil.NewUser(t, "gspola", simTrustGroup)
	b := testutil.NewUser(t, "gspolb", simTrustGroup)
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group = simTrustGroup
		c.LockTimeout = time.Second
	})
	h.simUserJob(a, "a-job", 100)
	h.simUserJob(b, "b-job", 200)

	holder, out := startAs(t, a, "sh", "-c", holdLocks, "sh", h.cfg.SimDir)
	var held []string
	for out.Scan() && out.Text() != "ready" {
		held = append(held, out.Text())
	}
	t.Logf("user A: %v", held)
	if len(held) == 0 {
		t.Fatal("user A could not take even its own lock")
	}

	// A guard, not a timing assert: the call must not hang behind A's lock.
	resp := h.rawAs(osUser(t, b), strconv.Itoa(int(b.GroupGID))).call(api.MethodFreeze, map[string]any{"name": "b-job"})
	if resp["ok"] != true {
		t.Fatalf("freeze of B's process while A holds its locks: %v", resp)
	}
	resp = h.rawAs(osUser(t, a), strconv.Itoa(int(a.GroupGID))).call(api.MethodFreeze, map[string]any{"name": "a-job"})
	if msg, _ := resp["error"].(string); resp["ok"] != false || !strings.Contains(msg, fmt.Sprintf("uid %d", a.UID)) {
		t.Fatalf("freeze of A's own process while A holds its lock: %v; want an error naming uid %d", resp, a.UID)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "b-job"}); err != nil {
		t.Fatal(err)
	}
	// Once A lets go, its process freezes (from wherever the failed
	// freeze left it).
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a-job"}); err != nil {
		t.Fatalf("freeze of A's process once A let go of its lock: %v", err)
	}
}

// TestSimForgedRecordsIgnored: user A writes, wherever it can, records
// claiming GPU memory for user B's processes and for init (pid 1). None
// counts: not as B's usage, not as an external process's that would hold
// the GPU from placement; B's own record is untouched; and the daemon says
// once, in a bounded log line, which records it ignores.
func TestSimForgedRecordsIgnored(t *testing.T) {
	a := testutil.NewUser(t, "gspola", simTrustGroup)
	b := testutil.NewUser(t, "gspolb", simTrustGroup)
	core, logs := observer.New(zap.WarnLevel)
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.Group = simTrustGroup })
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.begin()
	if _, errOut, code := h.ctlAs(a, "run", "a-job", "--dir", "/", "--", "sleep", "600"); code != 0 {
		t.Fatalf("run as A: %s", errOut)
	}
	victim := h.simUserJob(b, "b-job", 300)

	gpu0 := simgpu.DeviceUUID(0)
	procs := filepath.Join(h.cfg.SimDir, "procs")
	forged := 0
	for _, pid := range []int{victim.PID, victim.InitPID, 1} {
		start, err := procfs.StartTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		rec := fmt.Sprintf(`{"pid":%d,"start_time":%d,"usage":{%q:2000},"parked":{}}`, pid, start, gpu0)
		for _, dir := range []string{procs, filepath.Join(procs, strconv.Itoa(int(a.UID))), filepath.Join(procs, strconv.Itoa(int(b.UID)))} {
			cmd := exec.Command("sh", "-c", `printf '%s' "$2" > "$1"`, "sh", filepath.Join(dir, strconv.Itoa(pid)+".json"), rec)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: a.Groups()}}
			if cmd.Run() == nil {
				forged++
			}
		}
	}
	if forged == 0 {
		t.Fatal("user A could write no record anywhere; nothing was tried")
	}

	h.refresh()
	h.refresh() // the same forged records again: not logged again
	gpus, err := h.client().GPUs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[0]; g.UsedMiB != 300 || len(g.Processes) != 1 || g.Processes[0].PID != victim.PID {
		t.Errorf("GPU 0 after A's %d forged records: used %d MiB, processes %+v; want only B's 300 MiB", forged, g.UsedMiB, g.Processes)
	}
	if p := h.proc("b-job"); p.VRAMMiB != 300 {
		t.Errorf("B's process after A's forged records: %d MiB, want 300", p.VRAMMiB)
	}
	// Each forged record is named once, in lines of at most
	// maxUntrustedLogged short entries (a sample taken while A was still
	// writing logs what it saw then).
	said := logs.FilterMessage("ignored simulated GPU records that are not the named process's own").All()
	named := map[string]int{}
	for _, line := range said {
		records, _ := line.ContextMap()["records"].([]any)
		if len(records) == 0 || len(records) > maxUntrustedLogged {
			t.Fatalf("log line names %d records: %v", len(records), line.ContextMap())
		}
		for _, r := range records {
			s, _ := r.(string)
			if !strings.HasPrefix(s, "procs/") || len(s) > 200 {
				t.Errorf("logged record %q", s)
			}
			named[s]++
		}
	}
	if len(named) == 0 || len(named) > forged {
		t.Errorf("log names %v; A forged %d records", named, forged)
	}
	for r, n := range named {
		if n != 1 {
			t.Errorf("%s logged %d times", r, n)
		}
	}
}
