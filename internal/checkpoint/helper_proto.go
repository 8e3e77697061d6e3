package checkpoint

import "errors"

// The helper protocol: JSON lines, requests on the helper's stdin and
// responses on its stdout, matched by id and answered in any order. The
// helper's first line (id 0) is its caps, or the error that keeps it from
// serving, after which it exits.

// Helper ops.
const (
	opState      = "state"
	opLock       = "lock"
	opCheckpoint = "checkpoint"
	opRestore    = "restore"
	opUnlock     = "unlock"
	opRestoreTID = "restore_tid"
	opCaps       = "caps"
)

// helperRequest is one request line.
type helperRequest struct {
	ID        uint64    `json:"id"`
	Op        string    `json:"op"`
	PID       int       `json:"pid,omitempty"`
	TimeoutMS int64     `json:"timeout_ms,omitempty"`
	Pairs     []GPUPair `json:"pairs,omitempty"`
}

// helperResponse is one response line; Error is empty on success.
type helperResponse struct {
	ID     uint64 `json:"id"`
	State  State  `json:"state,omitempty"`
	TID    int    `json:"tid,omitempty"`
	Caps   *Caps  `json:"caps,omitempty"`
	Error  string `json:"error,omitempty"`
	Class  string `json:"class,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// classes names the sentinels on the wire.
var classes = []struct {
	name string
	err  error
}{
	{"timeout", ErrTimeout},
	{"oom", ErrOutOfMemory},
	{"illegal_state", ErrIllegalState},
	{"not_cuda", ErrNotCUDA},
	{"not_checkpointable", ErrNotCheckpointable},
	{"rejected", ErrRejected},
	{"unsupported", ErrUnsupported},
	{"failed", ErrFailed},
}

// className returns the wire class of err ("failed" when none matches).
func className(err error) string {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "failed"
}

// classErr returns the sentinel of a wire class (ErrFailed when unknown).
func classErr(name string) error {
	for _, c := range classes {
		if c.name == name {
			return c.err
		}
	}
	return ErrFailed
}

// opName returns the OpError.Op of a helper op.
func opName(op string) string {
	switch op {
	case opState:
		return "get-state"
	case opRestoreTID:
		return "get-restore-tid"
	}
	return op
}

// errorResponse describes err in a response.
func errorResponse(id uint64, err error) helperResponse {
	r := helperResponse{ID: id, Error: err.Error(), Class: className(err)}
	var op *OpError
	if errors.As(err, &op) {
		r.Detail = op.Detail
	}
	return r
}
