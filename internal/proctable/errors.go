package proctable

import (
	"errors"
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
)

// Sentinel errors, wrapped with the process name.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
)

// TransitionError is an illegal state change.
type TransitionError struct {
	Name     string
	From, To api.State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("process %q: cannot go from %s to %s", e.Name, e.From, e.To)
}
