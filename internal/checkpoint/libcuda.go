package checkpoint

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the NVIDIA driver library the driver API path opens.
const DefaultLibrary = "libcuda.so.1"

// libcuda is the driver library loaded into this process (the helper, never
// the daemon), with cuInit done. Its methods are safe for concurrent use.
type libcuda struct {
	path    string
	version int32 // cuDriverGetVersion, e.g. 12090

	errorName  func(r cuResult, name **byte) cuResult
	getState   func(pid int32, state *int32) cuResult
	lock       func(pid int32, args *cuLockArgs) cuResult
	checkpoint func(pid int32, args *cuCheckpointArgs) cuResult
	restore    func(pid int32, args *cuRestoreArgs) cuResult
	unlock     func(pid int32, args *cuUnlockArgs) cuResult
	restoreTID func(pid int32, tid *int32) cuResult
}

// openLibcuda loads the library at path, binds the checkpoint API and calls
// cuInit(0). A missing library or symbol is ErrUnsupported.
func openLibcuda(path string) (*libcuda, error) {
	if path == "" {
		path = DefaultLibrary
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("no NVIDIA driver library: %v: %w", err, ErrUnsupported)
	}
	l := &libcuda{path: path}
	var cuInit func(flags uint32) cuResult
	var cuDriverGetVersion func(v *int32) cuResult
	syms := []struct {
		name string
		fn   any
	}{
		{"cuInit", &cuInit},
		{"cuDriverGetVersion", &cuDriverGetVersion},
		{"cuGetErrorName", &l.errorName},
		{"cuCheckpointProcessGetState", &l.getState},
		{"cuCheckpointProcessLock", &l.lock},
		{"cuCheckpointProcessCheckpoint", &l.checkpoint},
		{"cuCheckpointProcessRestore", &l.restore},
		{"cuCheckpointProcessUnlock", &l.unlock},
		{"cuCheckpointProcessGetRestoreThreadId", &l.restoreTID},
	}
	for _, s := range syms {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%s has no %s: driver 570 or newer needed: %w", path, s.name, ErrUnsupported)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	call, r := "cuInit", cuInit(0)
	if r == cuSuccess {
		call, r = "cuDriverGetVersion", cuDriverGetVersion(&l.version)
	}
	if r != cuSuccess {
		err := fmt.Errorf("%s: %s: %s: %w", path, call, l.name(r), ErrUnsupported)
		_ = purego.Dlclose(h)
		return nil, err
	}
	return l, nil
}

// caps reports what the loaded driver can do.
func (l *libcuda) caps() Caps {
	c := Caps{
		Kind:       "api",
		Version:    cudaVersion(l.version),
		DeviceMap:  l.version >= cuDeviceMapVersion,
		RestoreTID: true,
	}
	if l.version == cuR570Version {
		c.Warning = r570Warning
	}
	return c
}

// name returns the CUresult's name (cuGetErrorName), e.g. CUDA_ERROR_TIMEOUT.
func (l *libcuda) name(r cuResult) string {
	var p *byte
	if l.errorName(r, &p) != cuSuccess || p == nil {
		return fmt.Sprintf("CUresult %d", r)
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 128 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// fail turns a CUresult into an *OpError; success is nil.
func (l *libcuda) fail(op string, pid int, r cuResult) error {
	if r == cuSuccess {
		return nil
	}
	return &OpError{Op: op, PID: pid, Err: resultClass(op, r, false), Detail: l.name(r)}
}

// State returns the process's CUprocessState.
func (l *libcuda) State(pid int) (State, error) {
	var s int32
	if err := l.fail("get-state", pid, l.getState(int32(pid), &s)); err != nil {
		return "", err
	}
	if s < 0 || int(s) >= len(cuStates) {
		return "", &OpError{Op: "get-state", PID: pid, Err: ErrFailed, Detail: fmt.Sprintf("unknown CUprocessState %d", s)}
	}
	return cuStates[s], nil
}

// Lock locks the process's CUDA calls, waiting up to timeout (0: no limit)
// for the ones in flight.
func (l *libcuda) Lock(pid int, timeout time.Duration) error {
	var args cuLockArgs
	args.timeoutMs = lockTimeoutMs(timeout)
	return l.fail("lock", pid, l.lock(int32(pid), &args))
}

// lockTimeoutMs converts a lock timeout to whole milliseconds, rounding up
// and saturating; zero or negative means no timeout.
func lockTimeoutMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(ms)
}

// Checkpoint moves the locked process's GPU memory into its host memory.
func (l *libcuda) Checkpoint(pid int) error {
	var args cuCheckpointArgs
	return l.fail("checkpoint", pid, l.checkpoint(int32(pid), &args))
}

// Restore brings the process's GPU memory back, onto other GPUs when pairs
// is not empty.
func (l *libcuda) Restore(pid int, pairs []GPUPair) error {
	var args cuRestoreArgs
	if len(pairs) > 0 {
		if l.version < cuDeviceMapVersion {
			return &OpError{Op: "restore", PID: pid, Err: ErrUnsupported,
				Detail: fmt.Sprintf("a device map needs CUDA 13.0 (driver 580), the driver has CUDA %s", cudaVersion(l.version))}
		}
		cp, err := cuPairs(pairs)
		if err != nil {
			return &OpError{Op: "restore", PID: pid, Err: ErrFailed, Detail: err.Error()}
		}
		var pin runtime.Pinner
		pin.Pin(&cp[0])
		defer pin.Unpin()
		args.gpuPairs, args.gpuPairsCount = &cp[0], uint32(len(cp))
	}
	if r := l.restore(int32(pid), &args); r != cuSuccess {
		return &OpError{Op: "restore", PID: pid, Err: resultClass("restore", r, len(pairs) > 0), Detail: l.name(r)}
	}
	return nil
}

// Unlock lets the restored process run CUDA calls again.
func (l *libcuda) Unlock(pid int) error {
	var args cuUnlockArgs
	return l.fail("unlock", pid, l.unlock(int32(pid), &args))
}

// RestoreThreadID returns the thread the driver restores the process on.
func (l *libcuda) RestoreThreadID(pid int) (int, error) {
	var tid int32
	if err := l.fail("get-restore-tid", pid, l.restoreTID(int32(pid), &tid)); err != nil {
		return 0, err
	}
	return int(tid), nil
}
