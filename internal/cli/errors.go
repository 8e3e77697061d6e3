package cli

import (
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
)

// usageError is a mistake in flags or arguments; the usage is shown with
// it, or only hint when there is one.
type usageError struct {
	err  error
	hint string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef builds a usageError.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitStatus ends gpuschedctl with that status and no message.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errorLine is err as one line, with its wire code when it carries one.
func errorLine(err error) string {
	if code := api.CodeOf(err); code != "" {
		return printableLines(fmt.Sprintf("%s (%s)", err, code))
	}
	return printableLines(err.Error())
}
