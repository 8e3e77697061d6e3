package memfill

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeLibcuda builds testdata/fake_libcuda.c; it skips t without gcc.
func fakeLibcuda(t testing.TB) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the fake libcuda")
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-Wall", "-Werror",
		"-o", lib, filepath.Join("testdata", "fake_libcuda.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

func TestCUDAUnsupported(t *testing.T) {
	for _, lib := range []string{"/nonexistent/libcuda.so.1", "libc.so.6"} {
		if _, err := openCUDA(lib, 256); !errors.Is(err, ErrUnsupported) {
			t.Errorf("openCUDA(%s): %v, want ErrUnsupported", lib, err)
		}
	}
}

func TestCUDABackend(t *testing.T) {
	t.Setenv("FAKE_CUDA_TOTAL_MIB", "1024")
	b, err := openCUDA(fakeLibcuda(t), 256)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if free, total, err := b.Free(); err != nil || free != 1024 || total != 1024 {
		t.Fatalf("Free: %d of %d, %v", free, total, err)
	}
	// The context is current on the backend's thread only, as with CUDA.
	var free, total uintptr
	if r := b.cu.memGetInfo(&free, &total); r != 201 { // CUDA_ERROR_INVALID_CONTEXT
		t.Fatalf("a driver call off the backend's thread: CUresult %d", r)
	}
	var hs []handle
	for range 4 {
		h, err := b.Alloc()
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if _, err := b.Alloc(); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("Alloc on a full device: %v", err)
	}
	if free, _, err := b.Free(); err != nil || free != 0 {
		t.Fatalf("Free on a full device: %d, %v", free, err)
	}
	for _, h := range hs {
		if err := b.FreeChunk(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.FreeChunk(hs[0]); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_VALUE") {
		t.Fatalf("double free: %v", err)
	}
	if free, _, err := b.Free(); err != nil || free != 1024 {
		t.Fatalf("Free after freeing: %d, %v", free, err)
	}
}

// TestCUDAHelper runs a helper process on the cuda backend end to end.
func TestCUDAHelper(t *testing.T) {
	r := newRig(t, "")
	r.opts.Backend, r.opts.Library, r.opts.SimDir = "cuda", fakeLibcuda(t), ""
	r.opts.Env = append(r.opts.Env, "FAKE_CUDA_TOTAL_MIB=4096", "CUDA_VISIBLE_DEVICES="+r.uuid)
	f := r.start(t)
	st, err := f.Set(ctx(t), 3000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.TotalMiB != 4096 || st.HeldMiB != 11*256 || st.FreeMiB != 4096-11*256 || st.Error != "" {
		t.Fatalf("set target 3000: %+v", st)
	}
	if st, err = f.Set(ctx(t), 3000, 1024); err != nil || st.HeldMiB != 7*256 {
		t.Fatalf("set reserve 1024: %+v, %v", st, err)
	}
	if err := f.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}
