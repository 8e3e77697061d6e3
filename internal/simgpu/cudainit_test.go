package simgpu

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestInitCUDAInPIDNamespace checks the fake against what the real cuInit
// did on an H200: 304 in a new PID namespace that kept the host's /proc,
// success with a /proc of its own.
func TestInitCUDAInPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare")
	}
	if err := InitCUDA(); err != nil {
		t.Fatalf("plain process: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--pid", "--fork"}, false},
		{[]string{"--pid", "--fork", "--mount-proc"}, true},
	} {
		args := append(c.args, self, "-test.run", "^TestInitCUDAHelper$")
		cmd := exec.Command("unshare", args...)
		cmd.Env = append(os.Environ(), initCUDAHelperEnv+"=1")
		out, err := cmd.CombinedOutput()
		if got := err == nil; got != c.ok {
			t.Errorf("unshare %s: ok %v, want %v: %v\n%s", strings.Join(c.args, " "), got, c.ok, err, out)
		}
		if !c.ok && !strings.Contains(string(out), ErrOperatingSystem.Error()) {
			t.Errorf("unshare %s: want %q in\n%s", strings.Join(c.args, " "), ErrOperatingSystem, out)
		}
	}
}

// initCUDAHelperEnv marks the process TestInitCUDAInPIDNamespace starts.
const initCUDAHelperEnv = "GPUSCHED_TEST_INITCUDA"

// TestInitCUDAHelper is InitCUDA in the process TestInitCUDAInPIDNamespace
// starts; it does nothing in a plain test run.
func TestInitCUDAHelper(t *testing.T) {
	if os.Getenv(initCUDAHelperEnv) == "" {
		t.Skip("helper")
	}
	if err := InitCUDA(); err != nil {
		if !errors.Is(err, ErrOperatingSystem) {
			t.Fatalf("not ErrOperatingSystem: %v", err)
		}
		t.Fatal(err)
	}
}
