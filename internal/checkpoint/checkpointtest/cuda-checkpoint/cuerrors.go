package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

// cudaResult is a CUresult and its cuGetErrorString text.
type cudaResult struct {
	code int
	text string
}

// cudaResults are the CUDA_ERROR_ names a fault may name (cuda.h's
// cudaError_enum), each with the text the real tool prints in quotes. Texts
// quoted by NVIDIA's tool: "invalid argument" (NVIDIA/cuda-checkpoint#35),
// "out of memory" and "OS call failed or operation not supported on this OS"
// (#44, #58), "operation not permitted" (#25), "operation not supported"
// (#34), "initialization error" (#10, google/gvisor#12600); the others as
// the driver's error strings read elsewhere (NCCL's "Cuda failure 401 'the
// operation cannot be performed in the present state'", cupy#5678's "device
// not ready").
var cudaResults = map[string]cudaResult{
	"CUDA_ERROR_INVALID_VALUE":    {1, "invalid argument"},
	"CUDA_ERROR_OUT_OF_MEMORY":    {2, "out of memory"},
	"CUDA_ERROR_NOT_INITIALIZED":  {3, "initialization error"},
	"CUDA_ERROR_NO_DEVICE":        {100, "no CUDA-capable device is detected"},
	"CUDA_ERROR_INVALID_DEVICE":   {101, "invalid device ordinal"},
	"CUDA_ERROR_OPERATING_SYSTEM": {304, "OS call failed or operation not supported on this OS"},
	"CUDA_ERROR_ILLEGAL_STATE":    {401, "the operation cannot be performed in the present state"},
	"CUDA_ERROR_NOT_READY":        {600, "device not ready"},
	"CUDA_ERROR_LAUNCH_FAILED":    {719, "unspecified launch failure"},
	"CUDA_ERROR_NOT_PERMITTED":    {800, "operation not permitted"},
	"CUDA_ERROR_NOT_SUPPORTED":    {801, "operation not supported"},
	"CUDA_ERROR_TIMEOUT":          {909, "the operation timed out"},
	"CUDA_ERROR_UNKNOWN":          {999, "unknown error"},
}

// checkErrorNames fails on a fault naming an error the fake cannot print.
func checkErrorNames(faults checkpointtest.Faults) error {
	for _, action := range slices.Sorted(maps.Keys(faults)) {
		if name := faults[action].Error; name != "" {
			if _, ok := cudaResults[name]; !ok {
				return fmt.Errorf("%s: %s: unknown error %q", checkpointtest.FaultsFile, action, name)
			}
		}
	}
	return nil
}
