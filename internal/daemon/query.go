package daemon

import (
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/ramtier"
	"github.com/gpusched/gpusched/pkg/api"
)

// lookup finds the process the caller names (see processKey) and checks
// that they may act on it.
func (d *Daemon) lookup(c *call, ref string) (proctable.Record, error) {
	k, err := d.processKey(c, ref)
	if err != nil {
		return proctable.Record{}, err
	}
	r, err := d.lookupAgain(ref, k)
	if err != nil {
		return proctable.Record{}, err
	}
	if !c.actor.owns(r.Owner.UID) {
		return proctable.Record{}, deniedf("process %q belongs to %s; you (%s) may only act on your own processes", ref, r.Owner.User, c.actor.User)
	}
	return r, nil
}

// lookupAgain is the record of k, which lookup found for ref: under k's
// lock, what the caller acts on is the process they were checked for,
// whatever ref would name by then.
func (d *Daemon) lookupAgain(ref string, k proctable.Key) (proctable.Record, error) {
	r, ok := d.table.Get(k)
	if !ok {
		return proctable.Record{}, api.Errorf(api.CodeNotFound, "process %q not found", ref)
	}
	return r, nil
}

// status answers the overview, or one process when a name is given.
func (d *Daemon) status(c *call) (any, error) {
	var p api.StatusParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	gv := d.gpuView()
	if p.Name != "" {
		r, err := d.lookup(c, p.Name)
		if err != nil {
			return nil, err
		}
		return d.wholeCmd(c, toAPI(r, gv), r), nil
	}
	st := api.Status{
		Version: Version, Protocol: api.ProtocolVersion, Backend: d.gpus.Name(),
		StartedAt: d.startedAt, UptimeSeconds: time.Since(d.startedAt).Seconds(),
		States: map[api.State]int{}, GPUs: make([]api.GPUSummary, 0, len(gv.devices)),
		HostMiB: d.hostMiB(nil), RAMBudgetMiB: d.cfg.RAMBudgetMiB, Driver: d.driverName(),
		DiskBytes: d.snaps.Bytes(), DiskBudget: d.cfg.DiskBudgetMiB << 20, CRIU: d.criuVersion(),
		Fillers: d.fillersAPI(),
	}
	uid := c.actor.UID
	if !c.actor.root() { // a user's own part of the tiers, and their shares
		st.CallerHostMiB, st.RAMShareMiB = d.table.View().HostMiBOf(uid), ramtier.Share(uid, d.cfg.RAMBudgetMiB, d.cfg.Limits.RAMFraction)
	}
	if d.criu != nil {
		st.DiskFree, st.DiskKeepFree, _ = d.snapshotDisk()
		if !c.actor.root() {
			st.CallerDiskBytes, st.DiskShare = d.snaps.BytesOf(uid), d.userDiskShare(uid)
		}
	}
	// Counted by owner, so that a user's status costs what their own
	// things do, however many another user holds.
	for uid, states := range d.table.View().States() {
		if c.actor.owns(uid) {
			for s, n := range states {
				st.Processes += n
				st.States[s] += n
			}
		}
	}
	st.Jobs = map[api.JobState]int{}
	for uid, states := range d.jobs.States() {
		if c.actor.owns(uid) {
			for s, n := range states {
				st.Jobs[s] += n
			}
		}
	}
	for _, l := range d.leases.granted() {
		if c.actor.owns(l.uid) {
			st.Leases++
		}
	}
	st.GPUError = gv.stale
	for _, dv := range gv.devices {
		st.GPUs = append(st.GPUs, api.GPUSummary{Index: dv.Index, UUID: dv.UUID, TotalMiB: dv.TotalMiB, UsedMiB: dv.UsedMiB,
			FreeMiB: free(dv.TotalMiB, dv.UsedMiB), Error: gv.problem(dv)})
	}
	return st, nil
}

// ps lists the caller's processes (every process for root), by name,
// each command cut (listReply).
func (d *Daemon) ps(c *call) (any, error) {
	var p api.PSParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	states, err := procStateFilter(p.States)
	if err != nil {
		return nil, err
	}
	gv, view := d.gpuView(), d.table.View()
	return d.listing(c, listField{"processes", func(yield func(any) bool) { // api.PSResult
		for _, r := range view.Records {
			if !c.actor.owns(r.Owner.UID) || p.User != "" && r.Owner.User != p.User || states != nil && !states[r.State] {
				continue
			}
			if !yield(listedProcess(toAPI(*r, gv))) {
				return
			}
		}
	}}), nil
}

// listGPUs reports every GPU, by index, with its processes, its health
// against the configured thresholds, the leases holding it and the memory
// frozen off it. Names of managed processes and lease ids are shown only to
// their owners.
func (d *Daemon) listGPUs(c *call) (any, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return nil, err
	}
	gv := d.gpuView()
	view := d.table.View()
	names := map[string]proctable.Record{}
	frozen := map[string]uint64{} // uuid -> MiB parked in host RAM
	for _, r := range view.Records {
		names[r.ID] = *r
		if r.InHostRAM() {
			for uuid, mib := range r.Checkpoint.VRAM() {
				frozen[uuid] += mib
			}
		}
	}
	leases := map[string][]string{} // uuid -> ids, in the order asked for
	for _, l := range d.leases.granted() {
		if c.actor.owns(l.uid) {
			for _, uuid := range l.uuids {
				leases[uuid] = append(leases[uuid], l.id)
			}
		}
	}
	checkpoint, warning := d.driverName(), d.driverWarning()
	fillers := map[string]api.Filler{}
	for _, f := range d.fillersAPI() {
		fillers[f.UUID] = f
	}
	out := api.GPUsResult{GPUs: make([]api.GPU, 0, len(gv.devices))}
	for _, dv := range gv.devices { // sorted by index
		problem := gv.problem(dv)
		unhealthy := gpuHealth(&d.cfg, dv)
		if problem != "" {
			unhealthy = append([]string{problem}, unhealthy...)
		}
		g := api.GPU{Index: dv.Index, UUID: dv.UUID, Name: dv.Name, TotalMiB: dv.TotalMiB, UsedMiB: dv.UsedMiB,
			FreeMiB: free(dv.TotalMiB, dv.UsedMiB), UtilPercent: dv.UtilPercent, PowerWatts: dv.PowerWatts, Processes: []api.GPUProcess{},
			PowerLimitWatts: dv.PowerLimitWatts, TempC: dv.TempC, Driver: gv.driver, Checkpoint: checkpoint, DriverWarning: warning,
			Healthy: len(unhealthy) == 0, Unhealthy: append([]string{}, unhealthy...),
			Leases: append([]string{}, leases[dv.UUID]...), FrozenMiB: frozen[dv.UUID], Error: problem}
		if f, ok := fillers[dv.UUID]; ok {
			g.Filler = &f
		}
		for _, pu := range gv.procs {
			if pu.UUID != dv.UUID {
				continue
			}
			gp := api.GPUProcess{PID: pu.PID, UsedMiB: pu.UsedMiB, UtilPercent: pu.UtilPercent}
			if r, ok := names[gv.owner[pu.PID]]; ok && c.actor.owns(r.Owner.UID) {
				gp.Managed = r.Name
			}
			g.Processes = append(g.Processes, gp)
		}
		out.GPUs = append(out.GPUs, g)
	}
	return out, nil
}

func free(total, used uint64) uint64 {
	if used > total {
		return 0
	}
	return total - used
}
