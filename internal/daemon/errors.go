package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/pkg/api"
)

// Daemon-level sentinels; handlers wrap them with the resource's identity.
var (
	ErrInvalid       = errors.New("invalid argument")
	ErrPermission    = errors.New("permission denied")
	ErrConflict      = errors.New("conflict")
	ErrUnavailable   = errors.New("unavailable")
	ErrDaemonRunning = errors.New("another gpuschedd is already serving this socket")
)

// invalidf builds an ErrInvalid with a message that stands on its own.
func invalidf(format string, args ...any) error {
	return &codedError{code: api.CodeInvalidArgument, msg: fmt.Sprintf(format, args...), base: ErrInvalid}
}

// conflictf builds an ErrConflict with a message that stands on its own.
func conflictf(format string, args ...any) error {
	return &codedError{code: api.CodeConflict, msg: fmt.Sprintf(format, args...), base: ErrConflict}
}

// deniedf builds an ErrPermission with a message that stands on its own.
func deniedf(format string, args ...any) error {
	return &codedError{code: api.CodePermissionDenied, msg: fmt.Sprintf(format, args...), base: ErrPermission}
}

// codedError is a message meant for the caller verbatim.
type codedError struct {
	code api.Code
	msg  string
	base error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.base }

// toWire maps any handler error to the wire: the one place errors become
// codes.
func toWire(err error) (api.Code, string) {
	var ce *codedError
	var ae *api.Error
	var te *proctable.TransitionError
	var ex *limits.Exceeded
	switch {
	case errors.As(err, &ae):
		return ae.Code, ae.Message
	case errors.As(err, &ce):
		return ce.code, err.Error()
	case errors.As(err, &te):
		return api.CodeConflict, err.Error()
	case errors.As(err, &ex):
		return api.CodeResourceExhausted, err.Error()
	case errors.Is(err, proctable.ErrNotFound), errors.Is(err, jobqueue.ErrNotFound):
		return api.CodeNotFound, err.Error()
	case errors.Is(err, proctable.ErrExists), errors.Is(err, jobqueue.ErrExists):
		return api.CodeExists, err.Error()
	case errors.Is(err, sandbox.ErrNoTasks):
		return api.CodeResourceExhausted, err.Error()
	case errors.Is(err, sandbox.ErrCommand):
		return api.CodeInvalidArgument, err.Error()
	case errors.Is(err, ErrInvalid):
		return api.CodeInvalidArgument, err.Error()
	case errors.Is(err, ErrPermission):
		return api.CodePermissionDenied, err.Error()
	case errors.Is(err, ErrConflict):
		return api.CodeConflict, err.Error()
	case errors.Is(err, ErrUnavailable):
		return api.CodeUnavailable, err.Error()
	case errors.Is(err, checkpoint.ErrRejected):
		return api.CodeInvalidArgument, err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, checkpoint.ErrTimeout):
		return api.CodeTimeout, err.Error()
	case errors.Is(err, checkpoint.ErrOutOfMemory), errors.Is(err, checkpoint.ErrNoSpace):
		return api.CodeResourceExhausted, err.Error()
	case errors.Is(err, errNoDriver), errors.Is(err, checkpoint.ErrUnsupported), errors.Is(err, checkpoint.ErrNotCheckpointable):
		return api.CodeUnavailable, err.Error()
	case errors.Is(err, checkpoint.ErrIllegalState), errors.Is(err, checkpoint.ErrNotCUDA):
		return api.CodeConflict, err.Error()
	}
	return api.CodeInternal, err.Error()
}
