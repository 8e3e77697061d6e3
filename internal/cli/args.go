package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// noArgs accepts no positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// oneName accepts exactly one process NAME.
func oneName(_ *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef("missing process NAME")
	case len(args) > 1:
		return usagef("unexpected arguments after %s: %s", args[0], strings.Join(args[1:], " "))
	}
	return nil
}

// optionalName accepts at most one process NAME.
func optionalName(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return oneName(cmd, args)
}

// oneArg accepts exactly one argument, named what in errors ("job NAME").
func oneArg(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usagef("missing %s", what)
		case len(args) > 1:
			return usagef("unexpected arguments after %s: %s", args[0], strings.Join(args[1:], " "))
		}
		return nil
	}
}

// commandFlagError is the flag error handler of a command that takes CMD
// after --, its usage being usage and its own words before CMD numbering
// words (run: NAME). An unknown flag that follows more words than that,
// with no -- yet, belongs to CMD: the hint is where CMD goes.
func commandFlagError(usage string, words int) func(*cobra.Command, error) error {
	return func(cmd *cobra.Command, err error) error {
		f := cmd.Flags()
		if errors.As(err, new(*pflag.NotExistError)) && f.ArgsLenAtDash() < 0 && len(f.Args()) > words {
			return usagef("put the command after --: %s (%w)", usage, err)
		}
		return &usageError{err: err}
	}
}
