package gpu

import "errors"

// ErrNoDriver means NVML could not be used because the NVIDIA driver is
// missing (no libnvidia-ml.so.1, or the kernel driver is not loaded).
var ErrNoDriver = errors.New("nvidia driver not found")
