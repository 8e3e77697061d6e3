package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamCgroupFrozenMidFreeze: a user freezes the cgroup of their
// tree while root's freeze of it is in the driver. The real driver then
// answers no call on the frozen process, its state query included (a lent
// H200, docs/hardware.md), and the simulated one waits so too: the
// freeze's lock was given up at once, but its rollback's calls waited
// until --checkpoint-timeout. Now every driver call of the operation is
// under the watch: the freeze fails at once naming cgroup.freeze and
// leaves the process locked (its driver states unknown); thawed, root's
// thaw resumes it from what the driver then says, and nothing is lost.
//
// The freeze is held in the driver by two NCCL ranks that map no
// shared-memory segment: the second rank's lock waits while the first is
// locked (NVIDIA/cuda-checkpoint#30).
func TestRedTeamCgroupFrozenMidFreeze(t *testing.T) {
	_, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gscriu7", "gscriu")
	own := userCgroup(t, top, u, true)
	h := newCkptHarness(t, config.DriverSim, longDriverDeadlines, func(c *config.Config) { c.Group, c.UserCgroups = "gscriu", filepath.Join(top, "user-%U") })
	userRanks(t, h, u)
	mine := treeInCgroupOfTheirs(t, h, u, own, "ranks")
	done := freezeHeldInLock(t, h)
	shAs(t, u, "echo 1 > "+mine+"/cgroup.freeze")
	awaitFrozen(t, mine)
	err := <-done
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "cgroup.freeze") {
		t.Fatalf("root's freeze, the tree's cgroup frozen while it waits in the driver: %v; want a failure naming cgroup.freeze at once", err)
	}
	if p := h.proc("ranks"); p.State != api.StateLocked {
		t.Fatalf("the process after the failed freeze: %s (%s), want locked: the driver answered nothing", p.State, p.Error)
	}
	shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze")
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "ranks"}); err != nil {
		t.Fatalf("root's thaw once the cgroup is thawed: %v", err)
	}
	h.wantUntouched("ranks", 200)
}

// TestRedTeamStoppedMidFreeze: a user stops one of their CUDA processes
// (SIGSTOP) while root's freeze of their tree is in the driver, which then
// answers nothing for it: the freeze fails at once naming the stop,
// leaving the process locked; continued, root's thaw resumes it.
func TestRedTeamStoppedMidFreeze(t *testing.T) {
	u := testutil.NewUser(t, "gscriu9", "gscriu")
	h := newCkptHarness(t, config.DriverSim, longDriverDeadlines, func(c *config.Config) { c.Group = "gscriu" })
	userRanks(t, h, u)
	done := freezeHeldInLock(t, h)
	pid := strconv.Itoa(h.cudaPIDs("ranks")[0])
	shAs(t, u, "kill -STOP "+pid)
	t.Cleanup(func() { shAs(t, u, "kill -CONT "+pid) })
	err := <-done
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "is stopped") {
		t.Fatalf("root's freeze, a CUDA process stopped while it waits in the driver: %v; want a failure naming the stop at once", err)
	}
	if p := h.proc("ranks"); p.State != api.StateLocked {
		t.Fatalf("the process after the failed freeze: %s (%s), want locked", p.State, p.Error)
	}
	shAs(t, u, "kill -CONT "+pid)
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "ranks"}); err != nil {
		t.Fatalf("root's thaw once the process is continued: %v", err)
	}
	h.wantUntouched("ranks", 200)
}

// userRanks has user u run "ranks": two NCCL ranks that map no
// shared-memory segment, so that a freeze's lock of the second waits while
// the first is locked (NVIDIA/cuda-checkpoint#30).
func userRanks(t *testing.T, h *ckptHarness, u testutil.User) {
	t.Helper()
	rank := h.bins.SimJob + " --vram 100 --nccl job --nccl-shm=false"
	if _, errOut, code := h.ctlAs(u, "run", "ranks", "--gpu", "0", "--", "/bin/sh", "-c", rank+" & "+rank+" & wait"); code != 0 {
		t.Fatalf("run ranks: %s", errOut)
	}
	h.followCount("ranks", "simjob: allocated", 2)
	h.refresh()
}

// freezeHeldInLock starts root's freeze of "ranks" and returns once a rank
// is locked, the other's lock waiting; done gets the freeze's error, or
// context.DeadlineExceeded after 60 s.
func freezeHeldInLock(t *testing.T, h *ckptHarness) (done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	out := make(chan error, 1)
	go func() {
		_, err := h.client().Freeze(ctx, api.FreezeParams{Name: "ranks"})
		out <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(h.cudaStates("ranks"), "locked"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("root's freeze locked no rank: %v", h.cudaStates("ranks"))
		}
	}
	return out
}

// TestRedTeamStoppedProcessFailsFreezeAtOnce: the real driver answers no
// call on a stopped CUDA process, not even within the lock's own timeout
// (a lent H200, docs/hardware.md), and the simulated one waits so too. A
// user who stopped their own process (SIGSTOP) made root's freeze of it
// wait until --lock-timeout plus --checkpoint-timeout. Now the freeze is
// refused at once, naming the stop, the process untouched; continued, it
// freezes and thaws as any other.
func TestRedTeamStoppedProcessFailsFreezeAtOnce(t *testing.T) {
	u := testutil.NewUser(t, "gscriu8", "gscriu")
	h := newCkptHarness(t, config.DriverSim, longDriverDeadlines, func(c *config.Config) { c.Group = "gscriu" })
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--", h.bins.SimJob, "--vram", "100"); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "simjob: allocated", 1)
	h.refresh()
	pid := h.cudaPIDs("theirs")[0]
	shAs(t, u, "kill -STOP "+strconv.Itoa(pid))
	t.Cleanup(func() { shAs(t, u, "kill -CONT "+strconv.Itoa(pid)) })
	// The stop lands once the process next runs: asked before, the freeze
	// would find it running and be caught mid-call (TestRedTeamStoppedMidFreeze).
	waitFor(t, func() bool { st, err := procfs.ReadStat(pid); return err == nil && st.State == 'T' })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := h.client().Freeze(ctx, api.FreezeParams{Name: "theirs"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "is stopped") {
		t.Fatalf("root's freeze of a stopped process: %v; want a refusal naming the stop at once", err)
	}
	shAs(t, u, "kill -CONT "+strconv.Itoa(pid))
	h.wantUntouched("theirs", 100)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "theirs"}); err != nil {
		t.Fatalf("root's freeze once the process is continued: %v", err)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "theirs"}); err != nil {
		t.Fatalf("root's thaw: %v", err)
	}
	h.wantUntouched("theirs", 100)
}

// longDriverDeadlines gives every checkpoint driver call ten minutes, so
// that within a test only the daemon's watch can end one early.
func longDriverDeadlines(c *config.Config) {
	c.LockTimeout, c.CheckpointTimeout = 10*time.Minute, 10*time.Minute
}
