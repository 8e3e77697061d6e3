package checkpoint

import "strings"

// What each NVIDIA driver can do. cuda-checkpoint itself is a 6 KB stub
// linked against libcuda.so.1: it checks cuDriverGetVersion and runs the
// tool that the driver library exports (the binary in NVIDIA's repository
// did not change between its 550 and 570 releases), so its --help, its
// flags and its messages are the installed driver's, and --help is proof
// of what the driver supports. The CLI gates on --help; the API on
// cuDriverGetVersion.

// cuDeviceMapVersion is the first cuDriverGetVersion (CUDA 13.0, driver
// 580) whose restore takes GPU pairs. The CUDA 13.0 release notes add GPU
// migration to cuda-checkpoint, and driver 580.65.06's --help is the first
// to list --device-map (both in NVIDIA/cuda-checkpoint#35 and #18); CUDA
// 12.9's cuda.h still has CUcheckpointRestoreArgs all reserved
// (NVIDIA/cuda-python#2145).
const cuDeviceMapVersion = 13000

// cuR570Version is what cuDriverGetVersion returns on the 570 driver branch
// (CUDA 12.8).
const cuR570Version = 12080

// r570Warning is the known problem of the 570 drivers.
const r570Warning = `driver 570 cannot checkpoint PyTorch processes: they fail with "operation not supported" (NVIDIA/cuda-checkpoint#34); use driver 575 or newer`

// driverWarning returns the known problem of a driver version as --help
// states it ("570.86.10"), or "".
func driverWarning(version string) string {
	if strings.HasPrefix(version, "570.") {
		return r570Warning
	}
	return ""
}
