package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binaries are the project's commands, built for this test run in a
// directory every user may read and execute.
type Binaries struct {
	Dir    string
	Daemon string // gpuschedd (its helpers; gpusched-init beside it supervises)
	Ctl    string // gpuschedctl
	SimJob string // gpusched-simjob
	Router string // gpusched-router
	// FakeCudaCheckpoint is the test stand-in for cuda-checkpoint, in a
	// subdirectory of its own so that no PATH finds it by accident.
	FakeCudaCheckpoint string
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// Build compiles the binaries once per test binary. Call Cleanup from
// TestMain to remove them.
func Build(t testing.TB) Binaries {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("build binaries: %v", buildErr)
	}
	return built
}

// Cleanup removes what Build made.
func Cleanup() {
	if built.Dir != "" {
		os.RemoveAll(built.Dir)
	}
}

func build() (Binaries, error) {
	root, err := ModuleRoot()
	if err != nil {
		return Binaries{}, err
	}
	dir, err := os.MkdirTemp("", "gpusched-bin")
	if err != nil {
		return Binaries{}, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	fake := filepath.Join(dir, "fake", "cuda-checkpoint")
	for _, args := range [][]string{
		{"-o", dir, "./cmd/gpuschedd", "./cmd/gpusched-init", "./cmd/gpuschedctl", "./cmd/gpusched-simjob", "./cmd/gpusched-router"},
		{"-o", fake, "./internal/checkpoint/checkpointtest/cuda-checkpoint"},
	} {
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return Binaries{}, fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	if err := os.Chmod(filepath.Dir(fake), 0o755); err != nil {
		os.RemoveAll(dir)
		return Binaries{}, err
	}
	return Binaries{
		Dir:                dir,
		Daemon:             filepath.Join(dir, "gpuschedd"),
		Ctl:                filepath.Join(dir, "gpuschedctl"),
		SimJob:             filepath.Join(dir, "gpusched-simjob"),
		Router:             filepath.Join(dir, "gpusched-router"),
		FakeCudaCheckpoint: fake,
	}, nil
}

// ModuleRoot finds the directory holding go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
