package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Environment of a test binary re-executed by InTree.
const (
	treeEnv    = "GPUSCHED_TEST_TREE"     // set: lay the tree out and execute argv[1:]
	treeLogEnv = "GPUSCHED_TEST_TREE_LOG" // the command's stdout and stderr, opened in the tree
)

// InTree makes cmd run as gpuschedd's trees run (internal/sandbox): pid 1
// of new PID and mount namespaces, with a /proc of its own PID namespace
// and, when its environment names a sim directory, the host's /proc bound
// at the directory's hostproc. log, when not "", receives its stdout and
// stderr, opened inside the tree so that CRIU can name it. The test
// binary itself lays the tree out: its TestMain must call TreeInit first.
func InTree(cmd *exec.Cmd, log string) {
	cmd.Args = append([]string{os.Args[0], cmd.Path}, cmd.Args[1:]...)
	cmd.Path = os.Args[0]
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, treeEnv+"=1", treeLogEnv+"="+log)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
}

// TreeInit, called first in a TestMain, returns at once unless this test
// binary was started by InTree; then it lays the tree out and executes the
// command, or exits 125.
func TreeInit() {
	if os.Getenv(treeEnv) == "" {
		return
	}
	if err := layTree(); err != nil {
		fmt.Fprintln(os.Stderr, "test tree:", err)
		os.Exit(125)
	}
	// Nothing the test binary inherited reaches the command: a descriptor
	// on the host's mounts would keep CRIU from dumping the tree.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintln(os.Stderr, "test tree:", err)
	os.Exit(125)
}

func layTree() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return err
	}
	// simgpu.EnvDir and simgpu.HostProc, which this package cannot import
	// (simgpu's tests import it).
	if sim := os.Getenv("GPUSCHED_SIM_DIR"); sim != "" {
		if err := unix.Mount("/proc", filepath.Join(sim, "hostproc"), "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	if err := unix.Dup2(null, 0); err != nil {
		return err
	}
	log := os.Getenv(treeLogEnv)
	if log == "" {
		return nil
	}
	fd, err := unix.Open(log, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT, 0o600)
	if err != nil {
		return err
	}
	for _, to := range []int{1, 2} {
		if err := unix.Dup2(fd, to); err != nil {
			return err
		}
	}
	return nil
}
