package execx

import (
	"errors"
	"fmt"
)

// ErrNotFound means the binary does not exist or cannot be executed.
var ErrNotFound = errors.New("executable not found")

// ExitError is a command that ran and failed: a non-zero exit status or
// death by a signal.
type ExitError struct {
	Cmd    string // path and arguments, shortened
	Status int    // exit status, or -1 when killed by Signal
	Signal string // "SIGKILL", when killed by a signal
	Stderr string // tail of stderr, trimmed
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s: exit status %d", e.Cmd, e.Status)
	if e.Signal != "" {
		msg = fmt.Sprintf("%s: killed by %s", e.Cmd, e.Signal)
	}
	if e.Stderr != "" {
		msg += fmt.Sprintf(": %q", e.Stderr)
	}
	return msg
}
