package jobqueue

import "errors"

// Sentinel errors, wrapped with the job's identity.
var (
	ErrNotFound = errors.New("no such job")
	ErrExists   = errors.New("job name in use")
)
