package checkpoint

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// The C ABI of libcuda's checkpoint API (cuda.h, CUDA 12.8 to 13.x). Every
// argument struct is 64 bytes and must be zeroed apart from the fields set.

// CUprocessState values.
var cuStates = [...]State{StateRunning, StateLocked, StateCheckpointed, StateFailed}

// cuLockArgs is CUcheckpointLockArgs.
type cuLockArgs struct {
	timeoutMs uint32
	reserved0 uint32
	reserved1 [7]uint64
}

// cuCheckpointArgs is CUcheckpointCheckpointArgs.
type cuCheckpointArgs struct{ reserved [8]uint64 }

// cuUnlockArgs is CUcheckpointUnlockArgs.
type cuUnlockArgs struct{ reserved [8]uint64 }

// cuRestoreArgs is CUcheckpointRestoreArgs (the CUDA 13 layout; before 13.0
// all 64 bytes were reserved, which a nil gpuPairs keeps).
type cuRestoreArgs struct {
	gpuPairs      *cuGPUPair
	gpuPairsCount uint32
	reserved      [44]byte
	reserved1     uint64
}

// cuUUID is CUuuid: a GPU UUID's 16 bytes.
type cuUUID [16]byte

// cuGPUPair is CUcheckpointGpuPair.
type cuGPUPair struct {
	oldUUID cuUUID
	newUUID cuUUID
}

// parseGPUUUID converts "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the
// "GPU-" prefix optional) to a CUuuid.
func parseGPUUUID(s string) (cuUUID, error) {
	var u cuUUID
	h := strings.ReplaceAll(strings.TrimPrefix(s, "GPU-"), "-", "")
	if len(h) != 2*len(u) {
		return u, fmt.Errorf("bad GPU uuid %q", s)
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("bad GPU uuid %q", s)
	}
	return u, nil
}

// String formats u as NVIDIA does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (u cuUUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// cuPairs converts a device map to CUcheckpointGpuPairs.
func cuPairs(pairs []GPUPair) ([]cuGPUPair, error) {
	out := make([]cuGPUPair, len(pairs))
	for i, p := range pairs {
		var err error
		if out[i].oldUUID, err = parseGPUUUID(p.Old); err != nil {
			return nil, err
		}
		if out[i].newUUID, err = parseGPUUUID(p.New); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// cudaVersion formats cuDriverGetVersion's number (12090) as "12.9".
func cudaVersion(v int32) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
