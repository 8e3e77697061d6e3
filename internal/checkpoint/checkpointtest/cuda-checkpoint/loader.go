package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

// minDriverVersion is the lowest cuDriverGetVersion the real tool runs on
// (CUDA 12.4, driver 550).
const minDriverVersion = 12040

// start models how NVIDIA's cuda-checkpoint starts, and returns what it
// prints and its exit status when it cannot. The real binary is a 6 KB stub
// (bin/x86_64_Linux/cuda-checkpoint in NVIDIA/cuda-checkpoint): `readelf -d`
// shows it NEEDED libcuda.so.1, so without the driver library on the
// loader's path it dies as ld.so makes it (status 127, the message below,
// seen running it on a machine without the driver); its main calls
// cuDriverGetVersion, and when that fails or is at most 0x2f07 (12039) it
// writes "Insufficient driver\n" to stderr and returns -1 (status 255);
// otherwise it runs the tool that libcuda exports. With loader.needs_libcuda
// the fake finds libcuda.so.1 only in $LD_LIBRARY_PATH's directories, as on
// a machine whose driver library is off the default paths;
// loader.cuda_version is the version its cuDriverGetVersion returns.
func start(argv0 string, loader checkpointtest.Fault) (string, int) {
	if loader.NeedsLibcuda && !onLibraryPath("libcuda.so.1") {
		return fmt.Sprintf("%s: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or directory", argv0), 127
	}
	if loader.CUDAVersion != 0 && loader.CUDAVersion < minDriverVersion {
		return "Insufficient driver", 255
	}
	return "", 0
}

// onLibraryPath reports whether a directory of $LD_LIBRARY_PATH holds lib.
func onLibraryPath(lib string) bool {
	for _, dir := range strings.Split(os.Getenv("LD_LIBRARY_PATH"), ":") {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
			return true
		}
	}
	return false
}
