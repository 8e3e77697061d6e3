package daemon

import (
	"sort"
	"strconv"
)

// Bounds on a command the daemon keeps: a process record and a job keep
// their argv (a job its env too) until removed, and return the argv whole
// in status and job (listings cut it: api.ListCmdBytes).
const (
	// maxCommandBytes bounds a command's argv and environment together,
	// counted as execve counts them (each string with its NUL, a variable
	// as NAME=value).
	maxCommandBytes = 256 << 10
	// maxArgBytes is Linux's MAX_ARG_STRLEN (32 pages), NUL included:
	// execve refuses any longer argument or variable with E2BIG.
	maxArgBytes = 128 << 10
)

// checkCommandSize refuses (invalid_argument) a command whose argv and env
// go past maxCommandBytes, or with a string execve would refuse.
func checkCommandSize(what string, argv []string, env map[string]string) error {
	total := 0
	add := func(kind string, n int) error {
		if n > maxArgBytes {
			return invalidf("%s: %s of %d bytes; Linux allows at most %d (MAX_ARG_STRLEN, 128 KiB)", what, kind, n, maxArgBytes)
		}
		total += n
		return nil
	}
	for _, a := range argv {
		if err := add("a command argument", len(a)+1); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same env is refused for the same variable every time
	for _, k := range keys {
		if err := add("environment variable "+shortName(k), len(k)+1+len(env[k])+1); err != nil {
			return err
		}
	}
	if total > maxCommandBytes {
		return invalidf("%s: command and environment are %d bytes; at most %d (256 KiB) are accepted", what, total, maxCommandBytes)
	}
	return nil
}

// shortName quotes a variable name for a message, cut to 40 bytes.
func shortName(k string) string {
	if len(k) > 40 {
		return strconv.Quote(k[:40]) + "..."
	}
	return strconv.Quote(k)
}
