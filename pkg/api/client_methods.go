package api

import (
	"context"
	"fmt"
)

// Hello returns the daemon's version, capabilities and the caller's identity.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	var h Hello
	return &h, c.Call(ctx, MethodHello, nil, &h)
}

// Run starts a managed process.
func (c *Client) Run(ctx context.Context, p RunParams) (*Process, error) {
	var out Process
	return &out, c.Call(ctx, MethodRun, p, &out)
}

// Kill ends a process tree (see KillParams) and returns its final state.
func (c *Client) Kill(ctx context.Context, p KillParams) (*Process, error) {
	var out Process
	return &out, c.Call(ctx, MethodKill, p, &out)
}

// Status returns the daemon overview.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	return &out, c.Call(ctx, MethodStatus, nil, &out)
}

// Process returns one process by name.
func (c *Client) Process(ctx context.Context, name string) (*Process, error) {
	var out Process
	return &out, c.Call(ctx, MethodStatus, StatusParams{Name: name}, &out)
}

// PS lists the processes the caller may see, sorted by name.
func (c *Client) PS(ctx context.Context, p PSParams) ([]Process, error) {
	var out PSResult
	if err := c.Call(ctx, MethodPS, p, &out); err != nil {
		return nil, err
	}
	return out.Processes, nil
}

// Logs returns the last lines of a process's log.
func (c *Client) Logs(ctx context.Context, name string, lines int) ([]string, error) {
	var out LogsResult
	if err := c.Call(ctx, MethodLogs, LogsParams{Name: name, Lines: &lines}, &out); err != nil {
		return nil, err
	}
	return out.Lines, nil
}

// FollowLogs hands the last lines and then every new line to onLine until
// the process exits, onLine fails or ctx ends.
func (c *Client) FollowLogs(ctx context.Context, name string, lines int, onLine func(string) error) error {
	var out LogsResult
	return c.Stream(ctx, MethodLogs, LogsParams{Name: name, Lines: &lines, Follow: true}, func(e *Event) error {
		if e.Type == EventLog {
			return onLine(e.Line)
		}
		return nil
	}, &out)
}

// Wait blocks until the process exits (or timeout passes; 0 = forever),
// handing each state change to onEvent when it is not nil.
func (c *Client) Wait(ctx context.Context, p WaitParams, onEvent func(*Event) error) (*Process, error) {
	var out Process
	return &out, c.Stream(ctx, MethodWait, p, onEvent, &out)
}

// Rm forgets an exited process and returns its last record.
func (c *Client) Rm(ctx context.Context, name string) (*Process, error) {
	var out Process
	return &out, c.Call(ctx, MethodRm, RmParams{Name: name}, &out)
}

// Remove forgets several exited processes (p.Names), or every exited one
// the caller may remove (p.Exited), and says what it removed and what not.
func (c *Client) Remove(ctx context.Context, p RmParams) (*RmResult, error) {
	var out RmResult
	return &out, c.Call(ctx, MethodRm, p, &out)
}

// Events streams events to onEvent until it returns an error or ctx ends.
// The first event is always of type "subscribed".
func (c *Client) Events(ctx context.Context, p EventsParams, onEvent func(*Event) error) error {
	return c.Stream(ctx, MethodEvents, p, onEvent, nil)
}

// GPUs lists the GPUs with their memory and processes.
func (c *Client) GPUs(ctx context.Context) ([]GPU, error) {
	var out GPUsResult
	if err := c.Call(ctx, MethodGPUs, nil, &out); err != nil {
		return nil, err
	}
	return out.GPUs, nil
}

// Freeze parks a process's GPU memory in host RAM.
func (c *Client) Freeze(ctx context.Context, p FreezeParams) (*CheckpointResult, error) {
	var out CheckpointResult
	return &out, c.Call(ctx, MethodFreeze, p, &out)
}

// Thaw brings a frozen process back onto its GPUs.
func (c *Client) Thaw(ctx context.Context, p ThawParams) (*CheckpointResult, error) {
	var out CheckpointResult
	return &out, c.Call(ctx, MethodThaw, p, &out)
}

// Swap freezes p.Freeze and thaws p.Thaw.
func (c *Client) Swap(ctx context.Context, p SwapParams) (*SwapResult, error) {
	var out SwapResult
	return &out, c.Call(ctx, MethodSwap, p, &out)
}

// Activate makes p.Name resident (p.Hold is ignored: see Hold) and returns
// what it did.
func (c *Client) Activate(ctx context.Context, p ActivateParams) (*Activation, error) {
	p.Hold = false
	var out Activation
	return &out, c.Call(ctx, MethodActivate, p, &out)
}

// Hold activates with Hold set and returns once the process is resident.
// The Client is then occupied by the hold (other calls on it fail with a
// clear error) and Close releases the hold.
func (c *Client) Hold(ctx context.Context, p ActivateParams) (*Activation, error) {
	p.Hold = true
	var out *Activation
	err := c.Stream(ctx, MethodActivate, p, func(e *Event) error {
		if e.Type != EventActivated || e.Activation == nil {
			return nil
		}
		out = e.Activation
		return &heldError{name: p.Name}
	}, nil)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("activate %q: the daemon ended the hold without saying it held", p.Name)
	}
	return out, nil
}

// Migrate moves a process onto other GPUs.
func (c *Client) Migrate(ctx context.Context, p MigrateParams) (*CheckpointResult, error) {
	var out CheckpointResult
	return &out, c.Call(ctx, MethodMigrate, p, &out)
}

// Hibernate moves a process to disk.
func (c *Client) Hibernate(ctx context.Context, p HibernateParams) (*HibernateResult, error) {
	var out HibernateResult
	return &out, c.Call(ctx, MethodHibernate, p, &out)
}

// Fork restores copies of a process from one image.
func (c *Client) Fork(ctx context.Context, p ForkParams) (*ForkResult, error) {
	var out ForkResult
	return &out, c.Call(ctx, MethodFork, p, &out)
}

// Snapshots lists snapshots.
func (c *Client) Snapshots(ctx context.Context, p SnapshotsParams) (*SnapshotsResult, error) {
	var out SnapshotsResult
	return &out, c.Call(ctx, MethodSnapshots, p, &out)
}

// DeleteSnapshot removes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	var out Snapshot
	return &out, c.Call(ctx, MethodDeleteSnapshot, DeleteSnapshotParams{ID: id}, &out)
}

// Set changes a process's disk-tier policy.
func (c *Client) Set(ctx context.Context, p SetParams) (*Process, error) {
	var out Process
	return &out, c.Call(ctx, MethodSet, p, &out)
}

// Submit queues one job, or all of p.Jobs (none when any is invalid).
func (c *Client) Submit(ctx context.Context, p SubmitParams) ([]Job, error) {
	var out SubmitResult
	if err := c.Call(ctx, MethodSubmit, p, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Jobs lists jobs in submission order.
func (c *Client) Jobs(ctx context.Context, p JobsParams) ([]Job, error) {
	var out JobsResult
	if err := c.Call(ctx, MethodJobs, p, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// PruneJobs removes finished jobs and returns them.
func (c *Client) PruneJobs(ctx context.Context, p PruneJobsParams) ([]Job, error) {
	var out JobsResult
	if err := c.Call(ctx, MethodPruneJobs, p, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Job returns one job by name or id.
func (c *Client) Job(ctx context.Context, name string) (*Job, error) {
	var out Job
	return &out, c.Call(ctx, MethodJob, JobParams{Name: name}, &out)
}

// Cancel cancels a job: a queued one at once, a running one by ending its
// process tree. It returns the job once cancelled.
func (c *Client) Cancel(ctx context.Context, name string) (*Job, error) {
	var out Job
	return &out, c.Call(ctx, MethodCancel, JobParams{Name: name}, &out)
}

// WaitJob waits until the job is finished, handing each state change to
// onEvent (which may be nil), and returns the finished job.
func (c *Client) WaitJob(ctx context.Context, p JobWaitParams, onEvent func(*Event) error) (*Job, error) {
	var out Job
	return &out, c.Stream(ctx, MethodJobWait, p, func(e *Event) error {
		if onEvent == nil {
			return nil
		}
		return onEvent(e)
	}, &out)
}

// Acquire waits for a GPU lease; it holds until Release or until this
// client's connection closes.
func (c *Client) Acquire(ctx context.Context, p AcquireParams) (*Lease, error) {
	var out Lease
	return &out, c.Call(ctx, MethodAcquire, p, &out)
}

// Release ends a lease.
func (c *Client) Release(ctx context.Context, id string) (*Lease, error) {
	var out Lease
	return &out, c.Call(ctx, MethodRelease, ReleaseParams{ID: id}, &out)
}

// Leases lists the leases the caller may see.
func (c *Client) Leases(ctx context.Context) ([]Lease, error) {
	var out LeasesResult
	if err := c.Call(ctx, MethodLeases, nil, &out); err != nil {
		return nil, err
	}
	return out.Leases, nil
}

// Fill holds a GPU's total memory usage at a target.
func (c *Client) Fill(ctx context.Context, p FillParams) (*Filler, error) {
	var out Filler
	return &out, c.Call(ctx, MethodFill, p, &out)
}

// Unfill releases a GPU's filler.
func (c *Client) Unfill(ctx context.Context, gpu GPURef) (*Filler, error) {
	var out Filler
	return &out, c.Call(ctx, MethodUnfill, UnfillParams{GPU: &gpu}, &out)
}

// Fillers lists the fillers.
func (c *Client) Fillers(ctx context.Context) ([]Filler, error) {
	var out FillersResult
	if err := c.Call(ctx, MethodFillers, nil, &out); err != nil {
		return nil, err
	}
	return out.Fillers, nil
}
