package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/listing"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// startTimeout bounds the spawn handshake of one process.
const startTimeout = 30 * time.Second

// run starts a managed process as the caller (or, for root, a named user).
// Everything checkable is checked before anything changes.
func (d *Daemon) run(c *call) (any, error) {
	var p api.RunParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if err := api.ValidateName(p.Name); err != nil {
		return nil, invalidf("run: %v", err)
	}
	if len(p.Cmd) == 0 || p.Cmd[0] == "" {
		return nil, invalidf("run %q: cmd is empty; give an argv like [\"python3\", \"train.py\"]", p.Name)
	}
	for _, a := range p.Cmd {
		if strings.ContainsRune(a, 0) {
			return nil, invalidf("run %q: cmd argument contains a NUL byte", p.Name)
		}
	}
	if err := checkCommandSize(fmt.Sprintf("run %q", p.Name), p.Cmd, p.Env); err != nil {
		return nil, err
	}
	if p.Nice < -20 || p.Nice > 19 {
		return nil, invalidf("run %q: nice %d is outside -20..19", p.Name, p.Nice)
	}
	if p.Nice < 0 && !c.actor.root() {
		return nil, deniedf("run %q: nice %d below 0 needs root", p.Name, p.Nice)
	}
	if err := d.checkMPS(fmt.Sprintf("run %q", p.Name), p.MPSThreads, p.MPSMemLimit); err != nil {
		return nil, err
	}
	policy := api.Policy{Priority: p.Priority, Pin: p.Pin, TTL: p.TTL, Idle: p.Idle}
	if err := d.checkUserPriority(c.actor, fmt.Sprintf("run %q", p.Name), p.Priority); err != nil {
		return nil, err
	}
	if err := checkPolicy(c.actor, fmt.Sprintf("run %q", p.Name), policy, api.Policy{}); err != nil {
		return nil, err
	}
	owner, err := d.runAs(c.actor, p.User)
	if err != nil {
		return nil, err
	}
	gpus, err := d.usableGPUs(fmt.Sprintf("run %q", p.Name), p.GPU, p.GPUs)
	if err != nil {
		return nil, err
	}
	if p.Filled != 0 {
		if err := d.checkFilled(owner, p.Name, p.Filled, gpus); err != nil {
			return nil, err
		}
	}
	dir, err := d.commandDir(c.actor, owner, fmt.Sprintf("run %q", p.Name), p.Dir, p.Cmd[0], p.Env["PATH"])
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	env, err := d.environ(p, id, gpus)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), startTimeout)
	defer cancel()
	key := proctable.Key{UID: owner.UID, Name: p.Name}
	unlock, err := d.ops.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.claimName(key); err != nil {
		return nil, err
	}
	own, err := keptOfCaller(c.actor, fmt.Sprintf("run %q", p.Name))
	if err != nil {
		return nil, err
	}
	rec := proctable.Record{
		ID: id, Name: p.Name, Owner: owner, Cmd: p.Cmd, Dir: dir, GPUs: gpus, Nice: p.Nice, Policy: policy,
		State: api.StateStarting, BootID: d.bootID, CreatedAt: time.Now(),
		LogPath:    d.logPath(key),
		StatusPath: filepath.Join(d.statusDir(), id),
	}
	rec.MPSThreads, rec.MPSMemLimitMiB, rec.Rlimits, rec.CPUs, rec.OOMScoreAdj = p.MPSThreads, p.MPSMemLimit.MiB, own.rlimits, own.cpus, own.oomScoreAdj
	started, err := d.startProc(ctx, rec, env, false, d.admitProc(c.actor))
	if err == nil && p.Filled != 0 {
		started, err = d.attachFiller(ctx, started, p.Filled)
	}
	if err != nil {
		return nil, err
	}
	return toAPI(started, d.gpuView()), nil
}

// start claims the name, opens the log and status files, records the
// process (once admit, which may be nil, accepts its owner's count of live
// processes) and spawns it. A new process starts a new log unless keepLog
// (a job's next attempt appends): what a replaced process of the same name
// and owner logged is gone with its record, as after rm. The caller holds
// the name's op lock.
func (d *Daemon) start(ctx context.Context, rec proctable.Record, env []string, keepLog bool, admit func(live int) error) (proctable.Record, error) {
	if err := d.claimName(rec.Key()); err != nil {
		return rec, err
	}
	if admit != nil {
		// Before anything changes; Create asks again, atomically.
		if err := admit(d.table.View().LiveOf(rec.Owner.UID)); err != nil {
			return rec, err
		}
	}
	if err := d.addGPUUser(rec.Owner.UID); err != nil {
		return rec, err
	}
	if old, ok := d.table.Get(rec.Key()); ok { // the exited record this one replaces (claimName checked)
		if old.StatusPath != rec.StatusPath {
			os.Remove(old.StatusPath)
		}
		switch {
		case keepLog:
			rec.LogPath = old.LogPath // a job's next attempt goes on in its log
		case old.LogPath != rec.LogPath:
			d.removeLogs(old.LogPath) // kept at a path of an earlier version's
		}
	}
	if !keepLog {
		d.removeLogs(rec.LogPath)
	}
	logf, err := logfile.OpenAppend(rec.LogPath)
	if err != nil {
		return rec, err
	}
	defer logf.Close()
	status, err := os.OpenFile(rec.StatusPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return rec, fmt.Errorf("status file: %w", err)
	}
	defer status.Close()
	home, err := d.makeSandboxHome(rec.ID)
	if err != nil {
		os.Remove(rec.StatusPath)
		return rec, err
	}
	rec.Cgroup = d.userCgroupOf(rec.Owner, rec.ID)
	if _, err := d.table.CreateWithin(rec, admit); err != nil {
		os.Remove(rec.StatusPath)
		d.removeSandboxHome(rec.ID)
		if !keepLog {
			d.removeLogs(rec.LogPath)
		}
		return rec, err
	}
	st, err := sandbox.Start(ctx, sandbox.Spec{
		SupervisorPath: d.initPath, Mark: d.sandboxMark(), Argv: rec.Cmd, Env: env, Dir: rec.Dir,
		Cred: credOf(rec.Owner), Rlimits: rec.Rlimits, Nice: rec.Nice, OOMScoreAdj: rec.OOMScoreAdj, CPUs: rec.CPUs, Home: home,
		Log: logf, LogMax: d.cfg.LogMaxBytes, LogKeep: d.cfg.LogKeep, Status: status, HostProc: d.simHostProc(),
		Recorded: func(pid int, start uint64) error {
			_, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
				r.InitPID, r.InitStart = pid, start
				return nil
			})
			if err != nil {
				return err
			}
			return d.placeInit(rec, pid)
		},
	})
	if err != nil {
		if _, rerr := d.table.Remove(rec.Key(), nil); rerr != nil {
			d.log.Error("forget process that failed to start", zap.String("name", rec.Name), zap.Error(rerr))
		}
		os.Remove(rec.StatusPath)
		d.removeSandboxHome(rec.ID)
		d.removeCPU(rec)
		if !keepLog {
			d.removeLogs(rec.LogPath)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return rec, invalidf("run %q: cannot start as %s: %v (the supervisor binary %s is not accessible to that user)",
				rec.Name, rec.Owner.User, pe.Err, d.initPath)
		}
		return rec, fmt.Errorf("run %q: %w", rec.Name, err)
	}
	rt := d.procs.add(rec.ID, st.InitPID, st.Pidfd, true)
	started, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		r.State = api.StateRunning
		r.PID, r.PIDStart, r.StartedAt = st.PID, st.PIDStart, time.Now()
		return nil
	})
	d.watch(started, rt)
	d.sampler.kick()
	if err != nil {
		return rec, fmt.Errorf("run %q: started as pid %d but its record could not be updated: %w", rec.Name, st.PID, err)
	}
	cmd, cut := listing.Cut(rec.Cmd, logCmdBytes)
	d.log.Info("process started", zap.String("name", rec.Name), zap.String("id", rec.ID), zap.Int("pid", st.PID),
		zap.Int("init_pid", st.InitPID), zap.Uint32("uid", rec.Owner.UID), zap.Strings("cmd", cmd), zap.Bool("cmd_truncated", cut))
	return started, nil
}

// logCmdBytes bounds the command a log line carries: a user's runs of
// 256 KiB commands, in a loop, wrote every one whole to the journal.
const logCmdBytes = 1024

// removeLogs deletes a log and its rotated copies.
func (d *Daemon) removeLogs(path string) { logfile.Remove(path, d.cfg.LogKeep) }

// runAs resolves who the process runs as: the caller, or a user root names.
func (d *Daemon) runAs(a actor, name string) (proctable.Owner, error) {
	self := proctable.Owner{UID: a.UID, GID: a.GID, Groups: a.Groups, User: a.User}
	if name == "" || name == a.User {
		return self, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return proctable.Owner{}, invalidf("run: user %q does not exist", name)
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if uint32(uid) == a.UID {
		// The caller's own uid, by number or another name: exactly the
		// caller's credentials, never groups it has dropped.
		return self, nil
	}
	if !a.root() {
		return proctable.Owner{}, deniedf("run: only root may run as another user (%s)", name)
	}
	o := proctable.Owner{UID: uint32(uid), GID: uint32(gid), User: u.Username, Groups: []uint32{}}
	ids, err := u.GroupIds()
	if err != nil {
		return proctable.Owner{}, fmt.Errorf("groups of %s: %w", name, err)
	}
	for _, s := range ids {
		if g, err := strconv.ParseUint(s, 10, 32); err == nil {
			o.Groups = append(o.Groups, uint32(g))
		}
	}
	return o, nil
}

// resolveGPUs turns the gpu/gpus references of a call (what, for
// messages) into UUIDs; none means every GPU.
func (d *Daemon) resolveGPUs(what string, gpu *api.GPURef, refs []api.GPURef) ([]string, error) {
	if gpu != nil {
		if len(refs) > 0 {
			return nil, invalidf("%s: give gpu or gpus, not both", what)
		}
		refs = []api.GPURef{*gpu}
	}
	devs := d.gpuView().devices
	out := []string{}
	if len(refs) == 0 {
		for _, dv := range devs {
			out = append(out, dv.UUID)
		}
		return out, nil
	}
	for _, ref := range refs {
		found := ""
		for _, dv := range devs {
			if ref.UUID == "" && dv.Index == ref.Index || ref.UUID != "" && dv.UUID == ref.UUID {
				found = dv.UUID
			}
		}
		if found == "" {
			return nil, invalidf("%s: GPU %s does not exist (this machine has %d: see `gpuschedctl gpus`)", what, ref, len(devs))
		}
		if slices.Contains(out, found) {
			return nil, invalidf("%s: GPU %s is listed twice", what, ref)
		}
		out = append(out, found)
	}
	return out, nil
}

// commandDir is the directory a command runs in: the requested one, else
// the caller's own cwd. The directory and the command (cmd0, searched in
// path) are checked as owner, the user the process runs as: a check as
// root would tell the caller whether paths it may not see exist.
func (d *Daemon) commandDir(a actor, owner proctable.Owner, what, dir, cmd0, path string) (string, error) {
	if dir == "" {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(a.PID) + "/cwd")
		if err != nil {
			return "", invalidf("%s: dir is required (the caller's working directory cannot be read)", what)
		}
		dir = cwd
	}
	if !filepath.IsAbs(dir) {
		return "", invalidf("%s: dir %q must be an absolute path", what, dir)
	}
	dir = filepath.Clean(dir)
	if err := d.checks.check(owner, what, cmd0, path, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// simHostProc is where a tree sees the host's /proc: in the sim directory
// on simulated GPUs (simgpu.HostProc), nowhere on real ones.
func (d *Daemon) simHostProc() string {
	if d.simDir == "" {
		return ""
	}
	return simgpu.HostProc(d.simDir)
}

// environ is the caller's env plus the documented GPUSCHED_* and CUDA_*
// variables, which take precedence; nothing else is added.
func (d *Daemon) environ(p api.RunParams, id string, gpus []string) ([]string, error) {
	env := map[string]string{}
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, invalidf("run %q: bad environment variable %q", p.Name, k)
		}
		env[k] = v
	}
	env["GPUSCHED_NAME"] = p.Name
	env["GPUSCHED_ID"] = id
	env["GPUSCHED_SOCKET"] = d.cfg.Socket
	if d.simDir != "" {
		env["GPUSCHED_SIM_DIR"] = d.simDir
	}
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(gpus, ",")
	env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
	d.attrEnv(env, p, len(gpus))
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}
