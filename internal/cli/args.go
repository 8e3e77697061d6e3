package cli

import (
	"strings"

	"github.com/spf13/cobra"
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
