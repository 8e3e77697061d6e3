package api

import "time"

// FillParams holds a GPU's total memory usage at a target: Ratio of its
// memory (0 < Ratio <= 1) or MiB (a size such as "20G"), exactly one of
// them. The filler yields memory to its owner's managed processes before
// they need it (launch, thaw, growth toward a declaration). A second fill on
// the same GPU by the same owner changes the target. Session ties the
// filler to the calling connection: it is released when that closes.
type FillParams struct {
	GPU     *GPURef `json:"gpu"` // required
	Ratio   float64 `json:"ratio,omitempty"`
	MiB     VRAM    `json:"mib,omitzero"`
	Session bool    `json:"session,omitempty"`
}

// UnfillParams releases a GPU's filler.
type UnfillParams struct {
	GPU *GPURef `json:"gpu"` // required
}

// FillersResult lists fillers by GPU index.
type FillersResult struct {
	Fillers []Filler `json:"fillers"`
}

// Filler is a memory-reservation filler: a helper process holding GPU memory
// in fixed chunks so that the GPU's total usage stays at TargetMiB.
type Filler struct {
	Index       int       `json:"index"`
	UUID        string    `json:"uuid"`
	User        string    `json:"user"`
	UID         uint32    `json:"uid"`
	Ratio       float64   `json:"ratio,omitempty"` // as asked; 0 when asked in MiB
	TargetMiB   uint64    `json:"target_mib"`      // total usage the GPU is held at
	HeldMiB     uint64    `json:"held_mib"`        // the filler's own allocation now
	ReservedMiB uint64    `json:"reserved_mib"`    // kept free for its owner's launches, thaws and declared growth
	ChunkMiB    uint64    `json:"chunk_mib"`
	PID         int       `json:"pid"`               // the helper process
	Process     string    `json:"process,omitempty"` // attached to this managed process (run --filled)
	Session     bool      `json:"session,omitempty"` // released when the connection that made it closes
	CreatedAt   time.Time `json:"created_at"`
	Error       string    `json:"error,omitempty"` // the helper's last failure, if any
}
