package memfill

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the NVIDIA driver library the cuda backend opens.
const DefaultLibrary = "libcuda.so.1"

// cuResult is a CUresult; 0 is CUDA_SUCCESS.
type cuResult int32

// cuda holds libcuda's entry points, with their C signatures.
type cuda struct {
	init           func(flags uint32) cuResult
	deviceGet      func(dev *int32, ordinal int32) cuResult
	primaryRetain  func(ctx *uintptr, dev int32) cuResult
	primaryRelease func(dev int32) cuResult
	ctxSetCurrent  func(ctx uintptr) cuResult
	memAlloc       func(ptr *uint64, bytes uintptr) cuResult
	memFree        func(ptr uint64) cuResult
	memGetInfo     func(free, total *uintptr) cuResult
	errorName      func(r cuResult, name **byte) cuResult
}

// cudaBackend holds device memory through the CUDA driver API on device
// ordinal 0 (the daemon sets CUDA_VISIBLE_DEVICES to the filler's GPU).
// Every driver call runs on one OS thread, where the device's primary
// context is current: a context is current per thread.
type cudaBackend struct {
	cu     cuda
	dev    int32
	chunk  uintptr // bytes
	calls  chan func()
	closed chan struct{}
}

// openCUDA loads the library at path ("" is DefaultLibrary) and makes the
// primary context of device 0 current on the backend's thread. A missing
// library, symbol or device is ErrUnsupported.
func openCUDA(path string, chunkMiB uint64) (*cudaBackend, error) {
	if path == "" {
		path = DefaultLibrary
	}
	b := &cudaBackend{chunk: uintptr(chunkMiB << 20), calls: make(chan func()), closed: make(chan struct{})}
	ready := make(chan error, 1)
	go b.thread(path, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return b, nil
}

// thread is the goroutine that owns the backend's OS thread: it never
// unlocks it, so the thread ends with it.
func (b *cudaBackend) thread(path string, ready chan<- error) {
	runtime.LockOSThread()
	defer close(b.closed)
	if err := b.load(path); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for fn := range b.calls {
		fn()
	}
	_ = b.cu.primaryRelease(b.dev)
}

// load binds the library and sets up the context on the calling thread.
func (b *cudaBackend) load(path string) error {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return fmt.Errorf("no NVIDIA driver library: %v: %w", err, ErrUnsupported)
	}
	syms := []struct {
		name string
		fn   any
	}{
		{"cuInit", &b.cu.init},
		{"cuDeviceGet", &b.cu.deviceGet},
		{"cuDevicePrimaryCtxRetain", &b.cu.primaryRetain},
		{"cuDevicePrimaryCtxRelease_v2", &b.cu.primaryRelease},
		{"cuCtxSetCurrent", &b.cu.ctxSetCurrent},
		{"cuMemAlloc_v2", &b.cu.memAlloc},
		{"cuMemFree_v2", &b.cu.memFree},
		{"cuMemGetInfo_v2", &b.cu.memGetInfo},
		{"cuGetErrorName", &b.cu.errorName},
	}
	for _, s := range syms {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			_ = purego.Dlclose(h)
			return fmt.Errorf("%s has no %s: %w", path, s.name, ErrUnsupported)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	var ctx uintptr
	err = b.check("cuInit", b.cu.init(0))
	if err == nil {
		err = b.check("cuDeviceGet", b.cu.deviceGet(&b.dev, 0))
	}
	if err == nil {
		err = b.check("cuDevicePrimaryCtxRetain", b.cu.primaryRetain(&ctx, b.dev))
	}
	if err == nil {
		if err = b.check("cuCtxSetCurrent", b.cu.ctxSetCurrent(ctx)); err != nil {
			_ = b.cu.primaryRelease(b.dev)
		}
	}
	if err != nil {
		_ = purego.Dlclose(h)
		return fmt.Errorf("%s: %w: %w", path, err, ErrUnsupported)
	}
	return nil
}

// do runs fn on the backend's thread.
func (b *cudaBackend) do(fn func()) {
	done := make(chan struct{})
	b.calls <- func() { fn(); close(done) }
	<-done
}

func (b *cudaBackend) Alloc() (handle, error) {
	var p uint64
	var r cuResult
	b.do(func() { r = b.cu.memAlloc(&p, b.chunk) })
	return handle(p), b.check("cuMemAlloc", r)
}

func (b *cudaBackend) FreeChunk(h handle) error {
	var r cuResult
	b.do(func() { r = b.cu.memFree(uint64(h)) })
	return b.check("cuMemFree", r)
}

func (b *cudaBackend) Free() (freeMiB, totalMiB uint64, err error) {
	var free, total uintptr
	var r cuResult
	b.do(func() { r = b.cu.memGetInfo(&free, &total) })
	return uint64(free) >> 20, uint64(total) >> 20, b.check("cuMemGetInfo", r)
}

// Close releases the primary context and ends the backend's thread.
func (b *cudaBackend) Close() {
	close(b.calls)
	<-b.closed
}

// check turns a failed call's CUresult into an error naming it.
func (b *cudaBackend) check(call string, r cuResult) error {
	if r == 0 {
		return nil
	}
	var p *byte
	if b.cu.errorName(r, &p) != 0 || p == nil {
		return fmt.Errorf("%s: CUresult %d", call, r)
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 128 {
		n++
	}
	return fmt.Errorf("%s: %s", call, unsafe.String(p, n))
}
