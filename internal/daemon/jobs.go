package daemon

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// Bounds on what one submission may ask for.
const (
	maxJobsPerSubmit = 100_000
	maxRetries       = 100
	maxJobPriority   = 1000
)

// onlyDefaults reports whether s, given beside a submission's jobs, sets
// no field but env and dir (each job's defaults): any other would be
// dropped unseen, a root caller's user among them (the jobs then ran as
// root).
func onlyDefaults(s api.JobSpec) bool {
	s.Env, s.Dir = nil, ""
	return reflect.DeepEqual(s, api.JobSpec{})
}

// submit queues one job or a batch: all of them, or none when any is
// invalid. Jobs run as the caller (root may name a user). It is bulk work,
// in one of the caller's turns: a batch writes a record a job (a thousand
// files for one call of a megabyte), so it waits for the caller's share of
// the daemon's CPU and is charged to it.
func (d *Daemon) submit(c *call) (any, error) {
	var p api.SubmitParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	specs := p.Jobs
	switch {
	case len(p.Jobs) > 0 && !onlyDefaults(p.JobSpec):
		return nil, invalidf("submit: give one job's fields or jobs, not both (only env and dir may go with jobs, as their defaults)")
	case len(p.Jobs) == 0:
		specs = []api.JobSpec{p.JobSpec}
	case len(p.Jobs) > maxJobsPerSubmit:
		return nil, invalidf("submit: %d jobs in one submission; at most %d", len(p.Jobs), maxJobsPerSubmit)
	}
	admit := d.admitJobs(c.actor)
	if admit != nil {
		// Before each job is checked; the queue asks again, atomically.
		if err := admit(c.actor.UID, d.unfinishedJobs(c.actor.UID), len(specs)); err != nil {
			return nil, err
		}
	}
	if err := d.checkSubmitMPS(specs); err != nil {
		return nil, err
	}
	jobs := make([]*jobqueue.Job, 0, len(specs))
	var errs []string
	denied := false           // a job was refused for the caller's rights, not its input
	var over *limits.Exceeded // a job was refused for a per-user cap
	for i, s := range specs {
		if len(p.Jobs) > 0 {
			if s.Env == nil {
				s.Env = p.Env
			}
			if s.Dir == "" {
				s.Dir = p.Dir
			}
		}
		j, err := d.newJob(c, s)
		if err != nil {
			if len(specs) == 1 {
				return nil, err
			}
			errs = append(errs, fmt.Sprintf("job %d: %v", i+1, err))
			denied = denied || errors.Is(err, ErrPermission)
			if over == nil {
				errors.As(err, &over)
			}
			continue
		}
		jobs = append(jobs, j)
	}
	if denied {
		return nil, deniedf("submit: nothing queued: %s", strings.Join(errs, "; "))
	}
	if over != nil {
		return nil, &limits.Exceeded{Flag: over.Flag, Msg: "submit: nothing queued: " + strings.Join(errs, "; ")}
	}
	if len(errs) > 0 {
		return nil, invalidf("submit: nothing queued: %s", strings.Join(errs, "; "))
	}
	if err := d.checkJobBytes(c.actor, jobs); err != nil {
		return nil, err
	}
	own, err := keptOfCaller(c.actor, "submit")
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		j.Rlimits, j.CPUs, j.OOMScoreAdj = own.rlimits, own.cpus, own.oomScoreAdj
	}
	added, err := d.jobs.AddWithin(jobs, admit)
	if err != nil {
		return nil, err
	}
	d.sched.kick()
	out := api.SubmitResult{Jobs: make([]api.Job, len(added))}
	for i, j := range added {
		out.Jobs[i] = d.jobToAPI(j)
	}
	return out, nil
}

// newJob validates one spec into a job ready to queue.
func (d *Daemon) newJob(c *call, s api.JobSpec) (*jobqueue.Job, error) {
	what := "submit"
	if s.Name != "" {
		if err := api.ValidateName(s.Name); err != nil {
			return nil, invalidf("submit: %v", err)
		}
		what = fmt.Sprintf("submit %q", s.Name)
		if jobqueue.IsID(s.Name) {
			return nil, invalidf("%s: names of the form j<number> are reserved for job ids", what)
		}
	}
	if len(s.Cmd) == 0 || s.Cmd[0] == "" {
		return nil, invalidf("%s: cmd is empty; give an argv like [\"python3\", \"train.py\"]", what)
	}
	for _, a := range s.Cmd {
		if strings.ContainsRune(a, 0) {
			return nil, invalidf("%s: cmd argument contains a NUL byte", what)
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, invalidf("%s: bad environment variable %q", what, k)
		}
	}
	if err := checkCommandSize(what, s.Cmd, s.Env); err != nil {
		return nil, err
	}
	gpus := s.GPUs
	switch {
	case gpus == 0:
		gpus = 1
	case gpus < 0:
		return nil, invalidf("%s: gpus %d: must be at least 1", what, s.GPUs)
	}
	switch {
	case s.Retries < 0 || s.Retries > maxRetries:
		return nil, invalidf("%s: retries %d: must be 0..%d", what, s.Retries, maxRetries)
	case s.Priority < -maxJobPriority || s.Priority > maxJobPriority:
		return nil, invalidf("%s: priority %d: must be %d..%d", what, s.Priority, -maxJobPriority, maxJobPriority)
	}
	if err := d.checkUserPriority(c.actor, what, s.Priority); err != nil {
		return nil, err
	}
	if err := checkNice(c.actor, what, s.Nice); err != nil {
		return nil, err
	}
	if err := d.checkJobMPS(what, s); err != nil {
		return nil, err
	}
	owner, err := d.runAs(c.actor, s.User)
	if err != nil {
		return nil, err
	}
	if s.Name != "" {
		if r, ok := d.table.Get(proctable.Key{UID: owner.UID, Name: s.Name}); ok && r.Live() && r.Job == "" {
			return nil, api.Errorf(api.CodeExists, "%s: a running process holds that name; choose another", what)
		}
	}
	dir, err := d.commandDir(c.actor, owner, what, s.Dir, s.Cmd[0], s.Env["PATH"])
	if err != nil {
		return nil, err
	}
	vram := s.VRAM.MiB
	if s.VRAM.Auto {
		vram, _ = d.learned.Get(owner.UID, s.Cmd)
	}
	j := &jobqueue.Job{
		Name: s.Name, Owner: jobqueue.Owner(owner), Cmd: s.Cmd, Dir: dir, Env: s.Env,
		VRAM: s.VRAM, VRAMMiB: vram, GPUs: gpus, Priority: s.Priority, Timeout: time.Duration(s.Timeout),
		Retries: s.Retries, RetriesLeft: s.Retries, Preemptible: s.Preemptible,
		State: api.JobQueued, SubmittedAt: time.Now(), Attempts: []api.Attempt{},
	}
	j.Nice, j.MPSThreads, j.MPSMemLimitMiB = s.Nice, s.MPSThreads, s.MPSMemLimit.MiB
	if why := d.neverFits(j); why != "" {
		return nil, invalidf("%s: can never start on this machine: %s", what, why)
	}
	return j, nil
}

// lookupJob finds a job by id, or by name (see jobKey) its owner's newest
// of that name, and checks that the caller may see and act on it.
func (d *Daemon) lookupJob(c *call, ref string) (*jobqueue.Job, error) {
	if ref == "" {
		return nil, invalidf("%s: name is empty", c.method)
	}
	j, err := d.jobKey(c, ref)
	if err != nil {
		return nil, err
	}
	if !c.actor.owns(j.Owner.UID) {
		return nil, deniedf("job %q belongs to %s; you (%s) may only act on your own jobs", ref, j.Owner.User, c.actor.User)
	}
	return j, nil
}

// listJobs lists the caller's jobs (every job for root) in submission
// order, each command cut (listReply).
func (d *Daemon) listJobs(c *call) (any, error) {
	var p api.JobsParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	states, err := jobStateFilter(p.State, p.States)
	if err != nil {
		return nil, err
	}
	if p.Recent > 0 && (states != nil || p.All) {
		return nil, invalidf("jobs: recent adds recently finished jobs to the unfinished ones; give it without all, state or states")
	}
	since, view := time.Now().Add(-time.Duration(p.Recent)), d.jobs.View()
	return d.listing(c, listField{"jobs", func(yield func(any) bool) { // api.JobsResult
		for _, j := range view {
			switch {
			case !c.actor.owns(j.Owner.UID), p.User != "" && j.Owner.User != p.User:
			case states != nil && !states[j.State]:
			case states == nil && !p.All && j.State.Terminal() && (p.Recent == 0 || j.EndedAt.Before(since)):
			default:
				if !yield(listedJob(d.jobToAPI(j))) {
					return
				}
			}
		}
	}}), nil
}

// job returns one job.
func (d *Daemon) job(c *call) (any, error) {
	var p api.JobParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	j, err := d.lookupJob(c, p.Name)
	if err != nil {
		return nil, err
	}
	return d.wholeJob(c, j), nil
}

// wholeJob is j as jobToAPI renders it, with its whole command where a
// finished job keeps it cut: what job, job_wait and cancel answer
// (readApart).
func (d *Daemon) wholeJob(c *call, j *jobqueue.Job) api.Job {
	out := d.jobToAPI(j)
	if j.CmdTruncated {
		if cmd := d.readApart(c, "job", j.Name, func() ([]string, error) { return d.jobs.Command(j) }); cmd != nil {
			out.Cmd, out.CmdTruncated = cmd, false
		}
	}
	return out
}

// jobToAPI renders a job with what the scheduler knows beyond its record:
// why it waits and the peaks of its running attempt. Its command is as the
// record keeps it: cut, once finished, past 4 KiB (wholeJob).
func (d *Daemon) jobToAPI(j *jobqueue.Job) api.Job {
	out := jobEvent(j)
	if j.State == api.JobQueued {
		if why := d.sched.reason(j); why != "" {
			out.Reason = why
		}
	}
	if j.Active() && len(out.Attempts) > 0 {
		live := d.sched.peaksOf(j.Proc)
		n := len(out.Attempts) - 1
		cur := out.Attempts[n]
		cur.PeakMiB = mergePeaks(cur.PeakMiB, live)
		out.Attempts = append(out.Attempts[:n:n], cur)
		out.PeakMiB = mergePeaks(out.PeakMiB, live)
	}
	return out
}

// mergePeaks is the per-GPU maximum of a and b, as a new map.
func mergePeaks(a, b map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = max(out[k], v)
	}
	return out
}
