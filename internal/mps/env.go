package mps

import (
	"strconv"
	"strings"
)

// The environment variables of NVIDIA MPS.
const (
	// EnvPipeDir is where the control daemon, its servers and the clients
	// meet; a client must see the same one as the control daemon.
	EnvPipeDir = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvLogDir is where the control daemon and its servers log.
	EnvLogDir = "CUDA_MPS_LOG_DIRECTORY"
	// EnvThreads caps a client's share of each GPU's threads, in percent.
	EnvThreads = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvMemLimit caps a client's memory on each GPU (FormatMemLimits).
	EnvMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// Limits on what a client may ask for.
const (
	MinThreads = 1
	MaxThreads = 100
)

// FormatMemLimits renders a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value in
// NVIDIA's documented form, ORDINAL=SIZE pairs separated by commas: one
// limit of mib MiB for each of gpus CUDA device ordinals (the positions in
// the client's CUDA_VISIBLE_DEVICES), as "0=4096M,1=4096M". It is "" when
// mib or gpus is 0.
func FormatMemLimits(gpus int, mib uint64) string {
	if gpus <= 0 || mib == 0 {
		return ""
	}
	size := strconv.FormatUint(mib, 10) + "M"
	parts := make([]string, gpus)
	for i := range parts {
		parts[i] = strconv.Itoa(i) + "=" + size
	}
	return strings.Join(parts, ",")
}

// ClientEnv is what makes a process on gpus GPUs an MPS client of this
// Manager's control daemon: its pipe directory, and the thread share and
// memory limit per GPU where they are set (threads 0 and mib 0 mean none).
func (m *Manager) ClientEnv(threads int, mib uint64, gpus int) map[string]string {
	env := map[string]string{EnvPipeDir: m.pipeDir}
	if threads > 0 {
		env[EnvThreads] = strconv.Itoa(threads)
	}
	if s := FormatMemLimits(gpus, mib); s != "" {
		env[EnvMemLimit] = s
	}
	return env
}
