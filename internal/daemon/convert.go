package daemon

import (
	"slices"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// wholeCmd is p with r's whole command where r keeps it cut: what status
// of one process and wait answer (readApart).
func (d *Daemon) wholeCmd(c *call, p api.Process, r proctable.Record) api.Process {
	if r.CmdTruncated {
		if cmd := d.readApart(c, "process", r.Name, func() ([]string, error) { return d.table.Command(r) }); cmd != nil {
			p.Cmd, p.CmdTruncated = cmd, false
		}
	}
	return p
}

// readApart reads a whole command a record keeps apart (up to 256 KiB,
// decoded) and charges it to the caller's share of the daemon's CPU
// (--max-cpu-per-user) without waiting: the call is a quick one, and the
// caller's next work held to the share pays for it, so that a loop of
// status calls on such a record is not free. A command that cannot be
// read is nil, with a log line: the answer keeps it cut (cmd_truncated).
func (d *Daemon) readApart(c *call, kind, name string, read func() ([]string, error)) []string {
	charge := d.bulk.Charge(c.actor.UID)
	cmd, err := read()
	charge()
	if err != nil {
		d.log.Warn("cannot read a "+kind+"'s whole command; answering it cut", zap.String("name", name), zap.Error(err))
		return nil
	}
	return cmd
}

// toAPI renders a record with the GPU memory its tree holds in view gv,
// its command as the record keeps it (cut past proctable.KeptCmdBytes:
// wholeCmd).
func toAPI(r proctable.Record, gv *gpuView) api.Process {
	p := api.Process{
		Name: r.Name, ID: r.ID, State: r.State, PID: r.PID, InitPID: r.InitPID,
		UID: r.Owner.UID, GID: r.Owner.GID, User: r.Owner.User,
		Cmd: r.Cmd, CmdTruncated: r.CmdTruncated, Dir: r.Dir, Nice: r.Nice, Log: r.LogPath,
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, ExitedAt: r.ExitedAt, Exit: r.Exit,
		GPUs: make([]api.ProcessGPU, 0, len(r.GPUs)), Error: r.Error, Note: r.Note, Policy: r.Policy, Snapshot: r.Snapshot,
		Job: r.Job, PreemptedBy: r.PreemptedBy, Filled: r.Filled,
	}
	p.MPSThreads, p.MPSMemLimit, p.CPUs = r.MPSThreads, r.MPSMemLimitMiB, r.CPUs
	switch {
	case !r.Live():
	case r.State == api.StateHibernated || r.State == api.StateRestoring:
		p.Tier = api.TierDisk
		if r.Checkpoint != nil {
			p.FrozenAt, p.DiskMiB = r.Checkpoint.FrozenAt, r.Checkpoint.MiB()
		}
	case r.Checkpoint != nil:
		p.Tier, p.HostMiB, p.FrozenAt = api.TierHost, r.Checkpoint.MiB(), r.Checkpoint.FrozenAt
	default:
		p.Tier = api.TierGPU
	}
	var usage map[string]uint64
	if r.Live() {
		usage = gv.usage[r.ID]
	}
	for _, uuid := range r.GPUs {
		idx, ok := gv.index[uuid]
		if !ok {
			idx = -1
		}
		p.GPUs = append(p.GPUs, api.ProcessGPU{Index: idx, UUID: uuid, UsedMiB: usage[uuid], UtilPercent: gv.ownUtilOf(r, uuid)})
		p.VRAMMiB += usage[uuid]
	}
	// Memory on a GPU the process was not given (it should not happen, but
	// it must not be hidden when it does).
	for uuid, mib := range usage {
		if slices.Contains(r.GPUs, uuid) {
			continue
		}
		idx, ok := gv.index[uuid]
		if !ok {
			idx = -1
		}
		p.GPUs = append(p.GPUs, api.ProcessGPU{Index: idx, UUID: uuid, UsedMiB: mib, UtilPercent: gv.ownUtilOf(r, uuid)})
		p.VRAMMiB += mib
	}
	return p
}

// eventOf turns a table change into the event subscribers see, or false
// when it is not worth an event (a change that kept the state).
func (d *Daemon) eventOf(c proctable.Change) (api.Event, bool) {
	gv := d.gpuView()
	switch {
	case c.New == nil && c.Old != nil:
		p := toAPI(*c.Old, gv)
		return api.Event{Seq: c.Seq, Type: api.EventRemoved, Name: c.Old.Name, State: c.Old.State, Process: &p, Reason: c.Why}, true
	case c.New != nil && (c.Old == nil || c.Old.State != c.New.State):
		p := toAPI(*c.New, gv)
		e := api.Event{Seq: c.Seq, Type: api.EventProcess, Name: c.New.Name, State: c.New.State, Process: &p}
		if c.Old != nil {
			e.PrevState = c.Old.State
		}
		return e, true
	}
	return api.Event{}, false
}

// gpuView is the latest GPU sample, or an empty one before the first.
func (d *Daemon) gpuView() *gpuView {
	if d.sampler == nil {
		return &gpuView{}
	}
	return d.sampler.current()
}
