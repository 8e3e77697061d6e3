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

// PrebuiltEnv names a directory of binaries built elsewhere, laid out as
// Binaries describes, for a compiled test binary run where there is no Go
// (a lent GPU machine; docs/hardware.md). Unset, Build compiles them.
const PrebuiltEnv = "GPUSCHED_TEST_BINARIES"

// Build compiles the binaries once per test binary, or takes them from
// $GPUSCHED_TEST_BINARIES. Call Cleanup from TestMain to remove them.
func Build(t testing.TB) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv(PrebuiltEnv); dir != "" {
			built, buildErr = prebuilt(dir)
			return
		}
		built, buildErr = build()
	})
	if buildErr != nil {
		t.Fatalf("build binaries: %v", buildErr)
	}
	return built
}

// Cleanup removes what Build made.
func Cleanup() {
	if built.Dir != "" && os.Getenv(PrebuiltEnv) == "" {
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
	return binariesIn(dir), nil
}

// prebuilt checks that dir holds every binary Binaries names.
func prebuilt(dir string) (Binaries, error) {
	b := binariesIn(dir)
	for _, p := range []string{b.Daemon, b.Ctl, b.SimJob, b.Router, b.FakeCudaCheckpoint, filepath.Join(dir, "gpusched-init")} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("$%s: %v", PrebuiltEnv, err)
		}
	}
	return b, nil
}

func binariesIn(dir string) Binaries {
	return Binaries{
		Dir:                dir,
		Daemon:             filepath.Join(dir, "gpuschedd"),
		Ctl:                filepath.Join(dir, "gpuschedctl"),
		SimJob:             filepath.Join(dir, "gpusched-simjob"),
		Router:             filepath.Join(dir, "gpusched-router"),
		FakeCudaCheckpoint: filepath.Join(dir, "fake", "cuda-checkpoint"),
	}
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
