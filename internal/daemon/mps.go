package daemon

import (
	"context"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/mps"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// Per-process attributes beyond the command: the CPU nice value, which every
// managed process learns as GPUSCHED_PRIORITY and GPUSCHED_NICE, and the
// optional NVIDIA MPS thread share and memory limit (docs/priority.md,
// docs/mps.md).

// Environment variables every managed process gets.
const (
	envPriority = "GPUSCHED_PRIORITY" // high, normal or low, from the nice value
	envNice     = "GPUSCHED_NICE"
)

// priorityClass is what GPUSCHED_PRIORITY says for a nice value: below 0
// is high, 0 normal, above 0 low.
func priorityClass(nice int) string {
	switch {
	case nice < 0:
		return "high"
	case nice > 0:
		return "low"
	}
	return "normal"
}

// openMPS builds the MPS manager; it only looks for the control binary,
// whose daemon keeps its pipes and logs beside the socket.
func (d *Daemon) openMPS() {
	d.mps = mps.New(mps.Config{Control: d.cfg.MPSControl, Dir: filepath.Join(filepath.Dir(d.cfg.Socket), "mps"), Log: d.log})
}

// adoptMPS counts the live MPS clients of the table after a restart, and
// stops a control daemon left running with none.
func (d *Daemon) adoptMPS(ctx context.Context) {
	var ids []string
	for _, r := range d.table.View().Records {
		if r.Live() && r.MPSClient() {
			ids = append(ids, r.ID)
		}
	}
	if err := d.mps.Adopt(ctx, ids); err != nil {
		d.log.Warn("adopt the MPS control daemon", zap.Error(err))
	}
}

// closeMPS waits for a stop of the control daemon in progress.
func (d *Daemon) closeMPS() {
	if d.mps != nil {
		d.mps.Close()
	}
}

// checkNice validates a nice value the way run does (what names the call).
func checkNice(a actor, what string, nice int) error {
	if nice < -20 || nice > 19 {
		return invalidf("%s: nice %d is outside -20..19", what, nice)
	}
	if nice < 0 && !a.root() {
		return deniedf("%s: nice %d below 0 needs root", what, nice)
	}
	return nil
}

// checkMPS validates MPS attributes (what names the call) and refuses them,
// changing nothing, when MPS is unavailable.
func (d *Daemon) checkMPS(what string, threads int, limit api.VRAM) error {
	if threads == 0 && limit.MiB == 0 && !limit.Auto {
		return nil
	}
	if threads < 0 || threads > mps.MaxThreads {
		return invalidf("%s: mps_threads %d is outside %d..%d (percent of each GPU's threads)", what, threads, mps.MinThreads, mps.MaxThreads)
	}
	if limit.Auto {
		return invalidf("%s: mps_mem_limit must be a size such as 8G, not auto", what)
	}
	attr := "mps_threads"
	if threads == 0 {
		attr = "mps_mem_limit"
	}
	if err := d.mps.Check(attr); err != nil {
		return api.Errorf(api.CodeUnavailable, "%s: %v", what, err)
	}
	return nil
}

// checkJobMPS adds to checkMPS what is particular to jobs: a preemptible job
// must be freezable, which an MPS client is not.
func (d *Daemon) checkJobMPS(what string, s api.JobSpec) error {
	if err := d.checkMPS(what, s.MPSThreads, s.MPSMemLimit); err != nil {
		return err
	}
	if s.Preemptible && (s.MPSThreads > 0 || s.MPSMemLimit.MiB > 0) {
		return invalidf("%s: a preemptible job cannot be an MPS client: preemption freezes a job, and CUDA checkpoint does not support MPS clients (drop preemptible, or mps_threads and mps_mem_limit)", what)
	}
	return nil
}

// checkSubmitMPS refuses a whole submission up front when any of its jobs
// asks for MPS on a machine without it, so the answer is `unavailable`
// rather than a list of invalid jobs.
func (d *Daemon) checkSubmitMPS(specs []api.JobSpec) error {
	for _, s := range specs {
		if s.MPSThreads == 0 && s.MPSMemLimit.MiB == 0 {
			continue
		}
		attr := "mps_threads"
		if s.MPSThreads == 0 {
			attr = "mps_mem_limit"
		}
		if err := d.mps.Check(attr); err != nil {
			return api.Errorf(api.CodeUnavailable, "submit: nothing queued: %v", err)
		}
	}
	return nil
}

// attrEnv adds the priority variables, and for an MPS client the MPS
// ones, to a managed process's environment (gpus: how many it sees).
func (d *Daemon) attrEnv(env map[string]string, p api.RunParams, gpus int) {
	env[envPriority] = priorityClass(p.Nice)
	env[envNice] = strconv.Itoa(p.Nice)
	if d.mps == nil || (p.MPSThreads == 0 && p.MPSMemLimit.MiB == 0) {
		return
	}
	for k, v := range d.mps.ClientEnv(p.MPSThreads, p.MPSMemLimit.MiB, gpus) {
		env[k] = v
	}
}

// startProc starts rec as start does; an MPS client first has the control
// daemon started for it (by the first client) and counted until it exits.
func (d *Daemon) startProc(ctx context.Context, rec proctable.Record, env []string, keepLog bool, admit func(live int) error) (proctable.Record, error) {
	if !rec.MPSClient() {
		return d.start(ctx, rec, env, keepLog, admit)
	}
	if err := d.mps.Acquire(ctx, rec.ID); err != nil {
		return rec, api.Errorf(api.CodeUnavailable, "run %q: %v", rec.Name, err)
	}
	started, err := d.start(ctx, rec, env, keepLog, admit)
	if err != nil {
		d.mps.Release(rec.ID)
	}
	return started, err
}

// mpsChange releases an MPS client whose process exited or whose record
// went; it runs in the table's change hook and never blocks.
func (d *Daemon) mpsChange(c proctable.Change) {
	if d.mps == nil {
		return
	}
	switch {
	case c.New == nil && c.Old != nil && c.Old.MPSClient():
		d.mps.Release(c.Old.ID)
	case c.New != nil && c.New.MPSClient() && !c.New.Live():
		d.mps.Release(c.New.ID)
	}
}

// refuseMPS refuses, up front, what CUDA checkpoint cannot do to an MPS
// client: freeze, hibernate, swap, migrate, fork and preemption.
func refuseMPS(r proctable.Record) error {
	if !r.MPSClient() {
		return nil
	}
	return api.Errorf(api.CodeUnavailable,
		"process %q is an MPS client: CUDA checkpoint does not support MPS clients, so it cannot be frozen, hibernated, swapped, migrated or forked", r.Name)
}
