package checkpoint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// closeGrace is how long Close lets the helper finish its calls in flight.
const closeGrace = 5 * time.Second

// APIOptions configure the driver API path.
type APIOptions struct {
	// HelperPath is the gpuschedd binary, re-executed as the helper with
	// argv[0] HelperArgv0.
	HelperPath string
	// Library is the driver library the helper opens; "" is DefaultLibrary
	// (or $GPUSCHED_LIBCUDA).
	Library string
	// Env is added to the helper's environment; for tests and debugging.
	Env []string
}

// API is the Driver that calls libcuda's checkpoint API. The library lives
// in a long-lived helper process (never the daemon), which pays the driver
// attach once instead of on every call as the cuda-checkpoint CLI does.
// Calls run concurrently; if the helper dies, the calls waiting on it fail
// with ErrFailed and the next call starts a new one. A call whose ctx ends
// returns at once (ErrTimeout past a deadline), but the driver call runs
// on to its end in the helper: reconcile with State.
type API struct {
	opts APIOptions
	caps Caps
	ids  atomic.Uint64

	mu     sync.Mutex // guards h and closed; held while a helper starts
	h      *helperProc
	closed bool
}

var _ Driver = (*API)(nil)

// NewAPI starts the helper and waits under ctx until it has loaded the
// library. A missing library, or one without the checkpoint API, is
// ErrUnsupported.
func NewAPI(ctx context.Context, opts APIOptions) (*API, error) {
	if opts.HelperPath == "" {
		return nil, errors.New("cuda helper: no helper path")
	}
	h, err := startHelper(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &API{opts: opts, caps: h.caps, h: h}, nil
}

// Caps reports the driver's capabilities, probed when the helper started.
func (a *API) Caps() Caps { return a.caps }

// State returns the process's checkpoint state.
func (a *API) State(ctx context.Context, pid int) (State, error) {
	r, err := a.do(ctx, helperRequest{Op: opState, PID: pid})
	return r.State, err
}

// Lock locks the process's CUDA calls, the driver waiting up to timeout
// (0: no limit) for those in flight.
func (a *API) Lock(ctx context.Context, pid int, timeout time.Duration) error {
	_, err := a.do(ctx, helperRequest{Op: opLock, PID: pid, TimeoutMS: int64(lockTimeoutMs(timeout))})
	return err
}

// Checkpoint moves the locked process's GPU memory into host memory.
func (a *API) Checkpoint(ctx context.Context, pid int) error {
	_, err := a.do(ctx, helperRequest{Op: opCheckpoint, PID: pid})
	return err
}

// Restore brings the process's GPU memory back, onto the mapped GPUs when
// pairs is not empty (Caps.DeviceMap).
func (a *API) Restore(ctx context.Context, pid int, pairs []GPUPair) error {
	_, err := a.do(ctx, helperRequest{Op: opRestore, PID: pid, Pairs: pairs})
	return err
}

// Unlock lets the process run CUDA calls again.
func (a *API) Unlock(ctx context.Context, pid int) error {
	_, err := a.do(ctx, helperRequest{Op: opUnlock, PID: pid})
	return err
}

// RestoreThreadID returns the thread the driver restores the process on.
func (a *API) RestoreThreadID(ctx context.Context, pid int) (int, error) {
	r, err := a.do(ctx, helperRequest{Op: opRestoreTID, PID: pid})
	return r.TID, err
}

// Close stops the helper, letting calls in flight finish for a grace
// period, and waits for it to exit.
func (a *API) Close() error {
	a.mu.Lock()
	h := a.h
	a.closed, a.h = true, nil
	a.mu.Unlock()
	if h != nil {
		h.stop(closeGrace)
	}
	return nil
}

// do sends one request to the helper, starting a new helper first if the
// last one died; a request that never reached a helper that had just died
// goes once more to a new one.
func (a *API) do(ctx context.Context, req helperRequest) (helperResponse, error) {
	fail := func(class, err error) (helperResponse, error) {
		return helperResponse{}, &OpError{Op: opName(req.Op), PID: req.PID, Err: class, Detail: err.Error()}
	}
	if err := ctx.Err(); err != nil {
		return fail(ctxClass(err), err)
	}
	for retried := false; ; retried = true {
		h, err := a.helper(ctx)
		if err != nil {
			return fail(classErr(className(err)), err)
		}
		req.ID = a.ids.Add(1)
		r, err := h.call(ctx, req)
		var notSent *notSentError
		if !errors.As(err, &notSent) {
			return r, err
		}
		if retried {
			return fail(ErrFailed, err)
		}
	}
}

// helper returns the running helper, starting one if the last has exited.
func (a *API) helper(ctx context.Context) (*helperProc, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("cuda driver api closed")
	}
	if a.h != nil && !a.h.gone() {
		return a.h, nil
	}
	h, err := startHelper(ctx, a.opts)
	if err != nil {
		return nil, err
	}
	a.h = h
	return h, nil
}
