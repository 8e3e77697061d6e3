package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestVersion builds gpuschedd as the Makefile does, with its version set
// by -ldflags -X, and asks it for that version.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpuschedd")
	ldflags := "-X github.com/gpusched/gpusched/internal/daemon.Version=v9.9.9-test"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || string(out) != "gpuschedd v9.9.9-test\n" {
		t.Errorf("gpuschedd --version: %v, %q", err, out)
	}
}
