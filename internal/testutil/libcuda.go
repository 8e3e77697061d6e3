package testutil

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// FakeLibcuda compiles the fake CUDA driver library
// (internal/checkpoint/checkpointtest/libcuda) into a temporary directory
// as libcuda.so.1 and returns its path; defines are extra gcc flags such as
// -DNO_CHECKPOINT. It skips t when gcc is missing.
func FakeLibcuda(t testing.TB, defines ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the fake libcuda: not found in PATH")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	args := append([]string{"-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-Wall", "-Werror", "-o", lib}, defines...)
	args = append(args, filepath.Join(root, "internal", "checkpoint", "checkpointtest", "libcuda", "fake_libcuda.c"))
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}
