package checkpoint

import (
	"regexp"
	"strconv"
)

// cuResult is a CUresult.
type cuResult int32

// The CUresults a checkpoint call is known to return (cuda.h's
// cudaError_enum).
const (
	cuSuccess          cuResult = 0
	cuErrInvalidValue  cuResult = 1
	cuErrOutOfMemory   cuResult = 2
	cuErrNotInit       cuResult = 3
	cuErrNoDevice      cuResult = 100
	cuErrInvalidDevice cuResult = 101
	cuErrOS            cuResult = 304
	cuErrIllegalState  cuResult = 401
	cuErrNotReady      cuResult = 600
	cuErrNotPermitted  cuResult = 800
	cuErrNotSupported  cuResult = 801
	cuErrTimeout       cuResult = 909
	cuErrUnknown       cuResult = 999
)

// cuErrors names each CUresult and gives its cuGetErrorString text, which is
// what cuda-checkpoint prints. Texts seen quoted by the tool:
// "invalid argument" (NVIDIA/cuda-checkpoint#35, #47), "out of memory" and
// "OS call failed or operation not supported on this OS" (#44, #58),
// "operation not permitted" (#25), "operation not supported" (#34),
// "initialization error" (#10, google/gvisor#12600). The others are the
// driver's strings as CUDA tools print them (NCCL's "Cuda failure 401 'the
// operation cannot be performed in the present state'", cupy#5678's
// "cudaErrorNotReady: device not ready").
var cuErrors = []struct {
	r    cuResult
	name string
	text string
}{
	{cuErrInvalidValue, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{cuErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{cuErrNotInit, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{cuErrNoDevice, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{cuErrInvalidDevice, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{cuErrOS, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{cuErrIllegalState, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{cuErrNotReady, "CUDA_ERROR_NOT_READY", "device not ready"},
	{cuErrNotPermitted, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{cuErrNotSupported, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{cuErrTimeout, "CUDA_ERROR_TIMEOUT", "the operation timed out"},
	{cuErrUnknown, "CUDA_ERROR_UNKNOWN", "unknown error"},
}

// resultClass maps the CUresult of a failed call to its class. op is the
// call (OpError.Op) and pairs whether a restore carried a device map.
func resultClass(op string, r cuResult, pairs bool) error {
	switch r {
	case cuErrOutOfMemory:
		return ErrOutOfMemory
	case cuErrTimeout:
		return ErrTimeout
	case cuErrNotReady:
		// A lock whose timeout passed before the process's CUDA calls
		// drained may answer NOT_READY rather than TIMEOUT.
		if op == "lock" {
			return ErrTimeout
		}
	case cuErrIllegalState:
		return ErrIllegalState
	case cuErrInvalidValue:
		// With a device map the argument refused is the map: restoring a
		// process onto GPUs the driver cannot use answers "invalid
		// argument" and leaves it checkpointed (NVIDIA/cuda-checkpoint#35).
		if op == "restore" && pairs {
			return ErrRejected
		}
		return ErrNotCUDA
	case cuErrNotInit, cuErrNoDevice:
		return ErrNotCUDA
	case cuErrNotSupported:
		return ErrNotCheckpointable
	}
	return ErrFailed
}

// resultName returns the CUresult's name, or "CUresult N" for one not known.
func resultName(r cuResult) string {
	for _, e := range cuErrors {
		if e.r == r {
			return e.name
		}
	}
	return "CUresult " + strconv.Itoa(int(r))
}

// toolErrorRE matches cuda-checkpoint's error line, which ends in the
// cuGetErrorString text in quotes: `Could not restore on process ID 1100100:
// "invalid argument"` (NVIDIA/cuda-checkpoint#35), `Could not lock on process
// ID N: "..."` (#58), `Error toggling CUDA in process ID N: "..."` (#25, #34),
// `Error getting process state for process ID N: "..."`
// (google/gvisor#12600), `Error initializing CUDA: "..."` (kaito-project/grit#9).
var toolErrorRE = regexp.MustCompile(`(?m)^(?:Could not \S+ on process ID \d+|Error [^"\n]*?): "([^"\n]*)"\s*$`)

// toolResult reads the CUresult of a failed cuda-checkpoint run from its
// output and exit status. The tool exits with the CUresult, which the kernel
// cuts to its low 8 bits (909, a timeout, exits 141; 304 exits 48; 401
// exits 145), so the text decides and the status is read only when an error
// line of the tool's shape has a text this table lacks (a newer driver's
// wording). ok is false when the output has no such line.
func toolResult(output string, status int) (r cuResult, ok bool) {
	m := toolErrorRE.FindAllStringSubmatch(output, -1)
	if len(m) == 0 {
		return 0, false
	}
	text := m[len(m)-1][1]
	for _, e := range cuErrors {
		if e.text == text {
			return e.r, true
		}
	}
	for _, e := range cuErrors {
		if int(e.r)&0xff == status {
			return e.r, true
		}
	}
	return 0, false
}
