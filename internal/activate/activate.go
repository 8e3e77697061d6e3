package activate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// Ops is what an activation needs of the daemon, on behalf of one caller:
// each call that names a process checks the caller's right to it.
type Ops interface {
	// Lookup returns the process called name.
	Lookup(name string) (Proc, error)
	// Procs lists the processes of uid.
	Procs(uid uint32) []Proc
	// Thaw thaws name, from RAM or disk, waiting up to wait for room.
	Thaw(ctx context.Context, name string, wait time.Duration) (api.CheckpointResult, error)
	// Freeze freezes name.
	Freeze(ctx context.Context, name string) (api.CheckpointResult, error)
	// Swap freezes off and thaws on (frozen), thawing off back when on's
	// thaw fails; wait is the thaw's wait for room.
	Swap(ctx context.Context, off, on string, wait time.Duration) (api.SwapResult, error)
}

// Activator runs activations and keeps the holds and recency they share.
// Activations of one owner's processes run one at a time, so that two
// never freeze each other's targets, and a second activation of one
// process finds it running.
type Activator struct{ st *state }

// New returns an Activator that knows nothing yet.
func New() *Activator { return &Activator{st: newState()} }

// Touch marks a process (its record id) as active now: the daemon calls
// it whenever one starts running (run, thaw).
func (a *Activator) Touch(id string) { a.st.touch(id) }

// Forget drops what is known of a process (its record id) that is gone.
func (a *Activator) Forget(id string) { a.st.forget(id) }

// Held reports whether a hold keeps the process (its record id).
func (a *Activator) Held(id string) bool { return a.st.isHeld(id) }

// thawable are the states an activation thaws from.
var thawable = []api.State{api.StateFrozen, api.StateHibernated, api.StateLocked, api.StateFailed}

// Activate makes p.Name resident and says what it did. With p.Hold the
// process is held from then on until release is called (nil otherwise);
// a failed activation has changed nothing it could undo, and its error
// says what it rolled back.
func (a *Activator) Activate(ctx context.Context, ops Ops, p api.ActivateParams) (_ api.Activation, release func(), _ error) {
	if p.Name == "" {
		return api.Activation{}, nil, api.Errorf(api.CodeInvalidArgument, "activate: name is empty")
	}
	target, err := ops.Lookup(p.Name)
	if err != nil {
		return api.Activation{}, nil, err
	}
	if err := checkEvict(ops, target, p.Evict); err != nil {
		return api.Activation{}, nil, err
	}
	unlock, err := a.st.lockOwner(ctx, target.UID)
	if err != nil {
		return api.Activation{}, nil, err
	}
	defer unlock()
	r := &run{a: a, ops: ops, p: p, start: time.Now(), ms: map[string]float64{}}
	if target, err = ops.Lookup(p.Name); err != nil { // as it is now, under the owner's lock
		return api.Activation{}, nil, err
	}
	out, err := r.activate(ctx, target)
	if err != nil {
		return api.Activation{}, nil, err
	}
	if p.Hold {
		release, out.Held = a.st.hold(target.ID), true
	}
	a.st.touch(target.ID)
	out.MS["total"] = msSince(r.start)
	return out, release, nil
}

// checkEvict refuses an evict list that names what the activation may not
// freeze: a process the caller may not act on, or one of another owner.
func checkEvict(ops Ops, target Proc, evict []string) error {
	for _, name := range evict {
		if name == target.Name {
			return api.Errorf(api.CodeInvalidArgument, "activate %q: evict names the process being activated", target.Name)
		}
		v, err := ops.Lookup(name)
		if err != nil {
			return err
		}
		if v.UID != target.UID {
			return api.Errorf(api.CodeInvalidArgument, "activate %q: evict names %q, which is not of the same owner; only the owner's processes make room", target.Name, name)
		}
	}
	return nil
}

// run is one activation in progress.
type run struct {
	a     *Activator
	ops   Ops
	p     api.ActivateParams
	start time.Time
	ms    map[string]float64
}

func (r *run) activate(ctx context.Context, target Proc) (api.Activation, error) {
	out := api.Activation{Name: target.Name, Was: target.State, Frozen: []api.CheckpointResult{}, MS: r.ms}
	if target.State == api.StateRunning {
		return out, nil
	}
	if !slices.Contains(thawable, target.State) {
		return out, api.Errorf(api.CodeConflict, "activate %q: it is %s; only a running, frozen or hibernated process can be made active", target.Name, target.State)
	}
	thawed, err := r.thaw(ctx, 0)
	if err == nil {
		out.Thaw = &thawed
		return out, nil
	}
	if api.CodeOf(err) != api.CodeResourceExhausted {
		return out, err
	}
	names := r.victims(target)
	switch {
	case len(names) == 0 && r.p.Timeout == 0:
		return out, fmt.Errorf("activate %q: nothing of its owner's on its GPUs may be frozen to make room: %w", target.Name, err)
	case len(names) == 0:
		thawed, err = r.thaw(ctx, time.Duration(r.p.Timeout))
		if err != nil {
			return out, err
		}
		out.Thaw = &thawed
		return out, nil
	case len(names) == 1 && target.State == api.StateFrozen:
		t := time.Now()
		sw, err := r.ops.Swap(ctx, names[0], target.Name, time.Duration(r.p.Timeout))
		r.ms["swap"] += msSince(t)
		if err != nil {
			return out, fmt.Errorf("activate %q: %w", target.Name, err)
		}
		out.Thaw, out.Frozen = &sw.Thaw, []api.CheckpointResult{sw.Freeze}
		return out, nil
	}
	return r.makeRoom(ctx, out, names)
}

// makeRoom freezes names in order until the target thaws (the last thaw
// may wait p.Timeout), and thaws them back, newest first, if it never does.
func (r *run) makeRoom(ctx context.Context, out api.Activation, names []string) (api.Activation, error) {
	var err error
	for i, name := range names {
		t := time.Now()
		var f api.CheckpointResult
		f, err = r.ops.Freeze(ctx, name)
		r.ms["freeze"] += msSince(t)
		if err != nil {
			break
		}
		out.Frozen = append(out.Frozen, f)
		var wait time.Duration
		if i == len(names)-1 {
			wait = time.Duration(r.p.Timeout)
		}
		var thawed api.CheckpointResult
		if thawed, err = r.thaw(ctx, wait); err == nil {
			out.Thaw = &thawed
			return out, nil
		}
		if api.CodeOf(err) != api.CodeResourceExhausted {
			break
		}
	}
	t := time.Now()
	undone := r.thawBack(ctx, out.Frozen)
	r.ms["rollback"] += msSince(t)
	froze := make([]string, len(out.Frozen))
	for i, f := range out.Frozen {
		froze[i] = f.Name
	}
	if len(froze) == 0 {
		froze = []string{"nothing"}
	}
	return out, fmt.Errorf("activate %q failed after freezing %s; %s: %w", out.Name, strings.Join(froze, ", "), undone, err)
}

// thawBack thaws back what an activation froze, newest first, and says how
// it went. It runs to the end even if the caller has gone.
func (r *run) thawBack(ctx context.Context, frozen []api.CheckpointResult) string {
	ctx = context.WithoutCancel(ctx)
	var failed []string
	for i := len(frozen) - 1; i >= 0; i-- {
		if _, err := r.ops.Thaw(ctx, frozen[i].Name, 0); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", frozen[i].Name, err))
		}
	}
	switch {
	case len(failed) > 0:
		return "could not thaw back " + strings.Join(failed, ", ")
	case len(frozen) > 0:
		return "thawed back what it froze"
	}
	return "nothing changed"
}

func (r *run) thaw(ctx context.Context, wait time.Duration) (api.CheckpointResult, error) {
	t := time.Now()
	defer func() { r.ms["thaw"] += msSince(t) }()
	return r.ops.Thaw(ctx, r.p.Name, wait)
}

// victims are the processes that may make room for target, in order.
func (r *run) victims(target Proc) []string {
	procs := r.ops.Procs(target.UID)
	cands := make([]candidate, len(procs))
	for i, p := range procs {
		cands[i] = candidate{Proc: p, last: r.a.st.lastActive(p.ID), held: r.a.st.isHeld(p.ID)}
	}
	return victims(target, cands, r.p.Evict)
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1e3 }
