package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// check verifies the crash test's invariants against the daemon that just
// started and the machine itself, returning one sentence per violation:
//   - every live record's init exists, no pid is tracked twice, the
//     driver's CUDA state agrees with the record's state, and nothing of a
//     running one's tree is left stopped; nothing is left in
//     a transitional state (but a job's process the new daemon is
//     starting); no process exited with a corrupted memory;
//   - every managed process that exists is tracked (no strays), and no CRIU,
//     cuda-checkpoint or filler helper of an earlier daemon is left;
//   - every snapshot directory (but the trash of retired ones) is listed,
//     every listed one complete, every hibernated process's snapshot holds
//     it;
//   - every acknowledged job is listed, and none started more than once;
//   - no simulated GPU is oversubscribed; no lease outlived its client;
//     every filler's helper runs.
func (r *crashRun) check() []string {
	ctx := ctxT(r.t)
	c := r.h.client()
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		return []string{"ps: " + err.Error()}
	}
	tree, err := procfs.ScanTree()
	if err != nil {
		r.t.Fatal(err)
	}
	tracked := map[int]string{} // init pid -> name
	hibernated := map[string]string{}
	for _, p := range ps {
		switch p.State {
		case api.StateRunning, api.StateFrozen, api.StateLocked, api.StateFailed:
			if other, dup := tracked[p.InitPID]; dup {
				bad("init %d is tracked as both %s and %s", p.InitPID, other, p.Name)
			}
			tracked[p.InitPID] = p.Name
			if !running(p.InitPID) {
				// It may have just ended: its exit must be recorded soon.
				if !r.exitRecorded(p.Name) {
					bad("%s is %s but its init %d is gone", p.Name, p.State, p.InitPID)
				}
				continue
			}
			for _, pid := range append([]int{p.InitPID}, tree.Descendants(p.InitPID)...) {
				if ps, err := procfs.ReadStat(pid); err == nil && ps.State == 'T' && p.State == api.StateRunning {
					bad("%s is running but its process %d is stopped", p.Name, pid)
				}
				st, err := r.h.reg.CheckpointState(pid)
				if err != nil {
					continue // not a CUDA process
				}
				if p.State == api.StateRunning && st != simgpu.StateRunning {
					bad("%s is running but its CUDA process %d is %s", p.Name, pid, st)
				}
				if p.State == api.StateFrozen && st != simgpu.StateCheckpointed {
					bad("%s is frozen but its CUDA process %d is %s", p.Name, pid, st)
				}
			}
		case api.StateHibernated:
			hibernated[p.Name] = p.Snapshot
		case api.StateExited:
			if p.Exit != nil && p.Exit.Code != nil && *p.Exit.Code == 3 {
				bad("%s exited 3: its host memory was corrupted", p.Name)
			}
		case api.StateStarting:
			if p.CreatedAt.Before(r.since) { // one the new daemon placed since is on its way
				bad("%s is left %s after a restart", p.Name, p.State)
			}
		default:
			bad("%s is left %s after a restart", p.Name, p.State)
		}
	}

	fillers, err := c.Fillers(ctx)
	if err != nil {
		bad("fillers: %v", err)
	}
	keep := map[int]bool{r.dp.cmd.Process.Pid: true}
	for pid := range tracked {
		keep[pid] = true
	}
	for _, f := range fillers {
		if !running(f.PID) {
			bad("the filler of GPU %d has no helper (pid %d)", f.Index, f.PID)
		}
		keep[f.PID] = true
	}
	for _, s := range r.strays(keep, 10*time.Second) {
		bad("stray process: %s", s)
	}

	snaps, err := c.Snapshots(ctx, api.SnapshotsParams{})
	if err != nil {
		return append(v, "snapshots: "+err.Error())
	}
	listed := map[string]api.Snapshot{}
	for _, s := range snaps.Snapshots {
		listed[s.ID] = s
	}
	dir := filepath.Join(r.h.cfg.StateDir, "snapshots")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := listed[e.Name()]; e.IsDir() && !ok && e.Name() != checkpoint.TrashDir {
			bad("snapshot directory %s is not listed", e.Name())
		}
	}
	for id, s := range listed {
		if _, err := os.Stat(filepath.Join(dir, id, "meta.json")); err != nil {
			bad("listed snapshot %s: %v", id, err)
		}
		if _, ok := listed[s.Parent]; s.Parent != "" && !ok {
			bad("snapshot %s lacks its parent %s", id, s.Parent)
		}
	}
	for name, id := range hibernated {
		if s, ok := listed[id]; !ok || !s.Holds {
			bad("%s is hibernated in snapshot %q, which does not hold it (%+v)", name, id, s)
		}
	}

	jobs, err := c.Jobs(ctx, api.JobsParams{All: true})
	if err != nil {
		return append(v, "jobs: "+err.Error())
	}
	seen := map[string]api.Job{}
	for _, j := range jobs {
		seen[j.Name] = j
		starts := r.starts(j.Name)
		if starts > 1 {
			bad("job %s started %d times", j.Name, starts)
		}
		if j.State == api.JobQueued && starts > 0 {
			bad("job %s is queued again after it started", j.Name)
		}
	}
	for name, acked := range r.jobs {
		if _, ok := seen[name]; acked && !ok {
			bad("job %s was acknowledged and is lost", name)
		}
	}

	snap, err := r.h.reg.Snapshot()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, d := range snap.Devices {
		if d.UsedMiB > d.TotalMiB {
			bad("GPU %d is oversubscribed: %d of %d MiB", d.Index, d.UsedMiB, d.TotalMiB)
		}
	}
	if leases, err := c.Leases(ctx); err != nil || len(leases) != 0 {
		bad("leases after a restart: %+v, %v", leases, err)
	}
	return v
}

// exitRecorded waits up to 10 s for the daemon to report name exited.
func (r *crashRun) exitRecorded(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.h.client().Wait(ctx, api.WaitParams{Name: name}, nil)
	return err == nil
}

// starts counts the times job name's command started.
func (r *crashRun) starts(name string) int {
	b, err := os.ReadFile(filepath.Join(r.marks, name))
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// strays lists the processes of this test (by command line, environment,
// working directory or open files under its directory) that belong neither
// to a kept process nor below one, after giving each grace to exit.
func (r *crashRun) strays(keep map[int]bool, grace time.Duration) []string {
	parent := map[int]int{}
	var mine []int
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		parent[pid] = st.PPID
		if refersTo(pid, r.h.dir) {
			mine = append(mine, pid)
		}
	}
	var out []string
	for _, pid := range mine {
		kept := false
		for p, depth := pid, 0; p > 1 && depth < 64; p, depth = parent[p], depth+1 {
			if keep[p] {
				kept = true
				break
			}
		}
		if kept || exitsWithin(pid, grace) {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
	}
	return out
}

// holds reports whether pid has path open.
func holds(pid int, path string) bool {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == path {
			return true
		}
	}
	return false
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// exitsWithin waits up to d for pid to exit, through a pidfd.
func exitsWithin(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(d.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// drain ends the crash test: every job is waited for and must have started
// exactly once when it ran; running processes are killed; every frozen and
// hibernated process is thawed, its memory verified, and killed; then no
// GPU memory is held and no process of the test is left.
func (r *crashRun) drain() {
	ctx := ctxT(r.t)
	c := r.h.client()
	for i := range 2 {
		if _, err := c.Unfill(ctx, api.GPURef{Index: i}); err != nil && api.CodeOf(err) != api.CodeNotFound {
			r.violations = append(r.violations, fmt.Sprintf("unfill GPU %d: %v", i, err))
		}
	}
	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range ps {
		if p.State == api.StateRunning && p.Job == "" {
			r.killAndWait(p.Name)
		}
	}
	jobs, err := c.Jobs(ctx, api.JobsParams{All: true})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, j := range jobs {
		j, err := c.WaitJob(ctx, api.JobWaitParams{Name: j.Name}, nil)
		if err != nil {
			r.violations = append(r.violations, fmt.Sprintf("job %s: %v", j.Name, err))
			continue
		}
		if n := r.starts(j.Name); n > 1 || (j.State == api.JobDone && n != 1) {
			r.violations = append(r.violations, fmt.Sprintf("job %s ended %s after %d starts", j.Name, j.State, n))
		}
	}
	ps, err = c.PS(ctx, api.PSParams{})
	if err != nil {
		r.t.Fatal(err)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	thawed := 0
	for _, p := range ps {
		switch p.State {
		case api.StateFrozen, api.StateHibernated, api.StateLocked, api.StateFailed:
		default:
			continue
		}
		if _, err := c.Thaw(ctx, api.ThawParams{Name: p.Name, Timeout: api.Duration(30 * time.Second)}); err != nil {
			r.violations = append(r.violations, fmt.Sprintf("%s (%s) does not thaw: %v", p.Name, p.State, err))
			continue
		}
		thawed++
		r.verifyMemory(p.Name)
		r.killAndWait(p.Name)
	}
	r.thawed = thawed
	for _, v := range r.strays(map[int]bool{r.dp.cmd.Process.Pid: true}, 10*time.Second) {
		r.violations = append(r.violations, "stray process at the end: "+v)
	}
	snap, err := r.h.reg.Snapshot()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, d := range snap.Devices {
		if d.UsedMiB != 0 {
			r.violations = append(r.violations, fmt.Sprintf("GPU %d holds %d MiB with every process gone", d.Index, d.UsedMiB))
		}
	}
}

// verifyMemory checks a thawed simulated job: its host memory pattern
// verifies on SIGUSR1, in its own log. A fork copy's log starts empty at
// the copy, so the source's start lines are not awaited there.
func (r *crashRun) verifyMemory(name string) {
	c := r.h.client()
	lines, err := c.Logs(ctxT(r.t), name, -1)
	if err != nil {
		r.t.Fatal(err)
	}
	text := strings.Join(lines, "\n")
	if strings.Contains(text, "simjob: pid=") {
		r.h.followCount(name, "simjob: host memory 4 MiB filled", 1)
	}
	before := strings.Count(text, "simjob: host memory verified")
	if _, err := c.Kill(ctxT(r.t), api.KillParams{Name: name, Signal: "SIGUSR1"}); err != nil {
		r.t.Fatal(err)
	}
	r.h.followCount(name, "simjob: host memory verified", before+1)
}

// killAndWait kills name and waits for it to exit.
func (r *crashRun) killAndWait(name string) {
	c := r.h.client()
	if _, err := c.Kill(ctxT(r.t), api.KillParams{Name: name}); err != nil {
		r.t.Fatalf("kill %s: %v", name, err)
	}
	if _, err := c.Wait(ctxT(r.t), api.WaitParams{Name: name}, nil); err != nil {
		r.t.Fatalf("wait %s: %v", name, err)
	}
}

// killLeftovers kills whatever the test left running, daemon first; when
// the test failed, it logs the end of the last daemon's stderr.
func (r *crashRun) killLeftovers() {
	if r.dp != nil && r.dp.cmd.ProcessState == nil {
		_ = r.dp.cmd.Process.Kill()
		_ = r.dp.cmd.Wait()
	}
	if r.dp != nil && r.t.Failed() {
		out := r.dp.stderr.String()
		r.t.Logf("the last daemon's stderr (end):\n%s", out[max(0, len(out)-8000):])
		lock := filepath.Join(r.h.cfg.StateDir, "lock")
		for _, pid := range procsWhere(r.t, func(pid int) bool { return holds(pid, lock) }) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			st, _ := procfs.ReadStat(pid)
			r.t.Logf("pid %d (parent %d, state %c) holds %s: %q", pid, st.PPID, st.State, lock, cmd)
		}
	}
	for _, s := range r.strays(map[int]bool{}, 0) {
		var pid int
		if _, err := fmt.Sscanf(s, "pid %d:", &pid); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
