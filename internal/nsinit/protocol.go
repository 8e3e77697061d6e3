package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Argv0 marks a re-executed binary as an init.
const Argv0 = "gpusched-init"

// File descriptors the daemon hands the init.
const (
	statusFD = 3
	syncFD   = 4
)

// Handshake messages.
const (
	msgReady   = "ready"
	msgGo      = "go"
	msgStarted = "started"
	msgError   = "error"
)

// DefaultPath is searched for the command when its environment has no PATH
// (the environment itself is not changed).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ExitReport is what an init writes to its status file when it ends.
type ExitReport struct {
	Code   *int   `json:"code,omitempty"`   // the command exited with this status
	Signal int    `json:"signal,omitempty"` // the command was killed by this signal
	Error  string `json:"error,omitempty"`  // the command never ran, and why
}

// ErrNoReport means the init ended without writing its status file (it was
// killed itself, or it is still running).
var ErrNoReport = errors.New("no exit report")

// ReadExitReport reads the status file the init wrote at exit.
func ReadExitReport(path string) (ExitReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ExitReport{}, fmt.Errorf("status %s: %w", path, ErrNoReport)
		}
		return ExitReport{}, fmt.Errorf("status %s: %w", path, err)
	}
	if len(b) == 0 {
		return ExitReport{}, fmt.Errorf("status %s: %w", path, ErrNoReport)
	}
	var r ExitReport
	if err := json.Unmarshal(b, &r); err != nil {
		return ExitReport{}, fmt.Errorf("status %s: %w", path, err)
	}
	return r, nil
}

// IsInit reports whether this process was started as an init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == Argv0 }
