package simgpu

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrOperatingSystem is CUDA_ERROR_OPERATING_SYSTEM (304), in the words
// cudaGetErrorString gives it.
var ErrOperatingSystem = errors.New("OS call failed or operation not supported on this OS")

// InitCUDA does what NVIDIA's cuInit asks of the process's /proc, so that a
// simulated CUDA process fails where a real one does. cuInit opens
// /proc/self/task/<gettid()>/comm (seen with an LD_PRELOAD probe on an
// H200, driver 580.159.04). A process in a PID namespace of its own that
// kept the host's /proc has no such file, since /proc/self is its host
// pid's directory and gettid() its namespace tid, and cuInit returns 304:
// PyTorch printed "CUDA initialization: Unexpected error from
// cudaGetDeviceCount() ... Error 304: OS call failed or operation not
// supported on this OS" in every gpuschedd tree until trees got a /proc
// of their own (docs/hardware.md, "The tree's own /proc"). It reads the
// real /proc, never the host's that procfs may have been pointed at.
func InitCUDA() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	path := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/comm"
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("CUDA initialization: %w (CUDA_ERROR_OPERATING_SYSTEM, 304: %v)", ErrOperatingSystem, err)
	}
	return f.Close()
}
