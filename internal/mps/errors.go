package mps

import (
	"errors"
	"fmt"
)

// ErrUnavailable means MPS cannot be used on this machine: the control
// binary was not found, or the control daemon cannot be started.
var ErrUnavailable = errors.New("NVIDIA MPS is unavailable")

// unavailableError is a sentence that says why MPS cannot be used; it
// matches ErrUnavailable without repeating it.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }
func (e *unavailableError) Unwrap() error { return ErrUnavailable }

// unavailable builds an error matching ErrUnavailable with its own message.
func unavailable(format string, args ...any) error {
	return &unavailableError{msg: fmt.Sprintf(format, args...)}
}
