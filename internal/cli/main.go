package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Exit statuses of gpuschedctl.
const (
	exitOK      = 0
	exitFailure = 1 // the call failed, or wait saw a process not exit 0
	exitUsage   = 2 // bad flags or arguments
)

// Main runs gpuschedctl with args (without the program name) and returns
// its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	return execute(context.Background(), args, stdout, stderr)
}

// execute is Main under a caller-supplied context.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: safeWriter{stdout}, stderr: safeWriter{stderr}, rawStdout: stdout, rawStderr: stderr}
	root := newRoot(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintf(a.stderr, "gpuschedctl: %s\n", errorLine(err))
	var usage *usageError
	if errors.As(err, &usage) {
		if usage.hint != "" {
			fmt.Fprintln(a.stderr, usage.hint)
		} else {
			fmt.Fprint(a.stderr, "\n"+cmd.UsageString())
		}
		return exitUsage
	}
	return exitFailure
}
