package memfill

import "errors"

var (
	// ErrUnsupported means the backend is absent: no driver library, a
	// symbol missing from it, or no usable device.
	ErrUnsupported = errors.New("not supported")
	// ErrGone means the helper exited or its connection broke.
	ErrGone = errors.New("filler gone")
)
