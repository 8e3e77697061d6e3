package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// CRIUCUDAPlugin compiles the stand-in for CRIU's CUDA plugin
// (internal/checkpoint/checkpointtest/criuplugin/cuda_plugin.c), running
// cudaCheckpoint, as cuda_plugin.so into a fresh directory and returns the
// directory: where CRIU finds it when given it as $CRIU_LIBS_DIR or
// --libdir. It skips t when gcc is missing.
func CRIUCUDAPlugin(t testing.TB, cudaCheckpoint string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the CRIU plugin: not found in PATH")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // a CRIU worker may run as a tree's owner
		t.Fatal(err)
	}
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-fvisibility=hidden", "-O2", "-Wall", "-Wextra", "-Werror",
		"-DCUDA_CHECKPOINT="+strconv.Quote(cudaCheckpoint), "-o", filepath.Join(dir, "cuda_plugin.so"),
		filepath.Join(root, "internal", "checkpoint", "checkpointtest", "criuplugin", "cuda_plugin.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return dir
}
