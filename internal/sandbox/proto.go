package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/gpusched/gpusched/internal/rlimit"
)

// Argv0 marks a re-executed binary as a supervisor.
const Argv0 = "gpusched-init"

// Descriptors the daemon hands the supervisor.
const (
	logFD       = 1 // also 2: the process's log (root-owned, O_APPEND)
	syncFD      = 3 // the handshake socket
	statusFD    = 4 // the exit-status file (root-owned)
	firstFreeFD = 5
)

// Handshake messages.
const (
	msgReady   = "ready"
	msgGo      = "go"
	msgStarted = "started"
	msgError   = "error"
	msgNoTasks = "notasks" // an error: no process could be started (EAGAIN: the tree's cgroup's pids.max)
)

// Bounds on what either side reads from the other.
const (
	maxSpecBytes   = 8 << 20 // the "go" line: the command's argv and environment
	maxLineBytes   = 4 << 10 // every other handshake line
	maxReportBytes = 4 << 10 // the exit report
)

// DefaultPath is searched for the command when its environment has no PATH
// (the environment itself is not changed).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// command is what the exec stage makes of itself: the caller's argv,
// environment and working directory, under the caller's resource limits.
type command struct {
	Argv    []string   `json:"argv"`
	Env     []string   `json:"env"`
	Dir     string     `json:"dir"`
	Rlimits rlimit.Set `json:"rlimits,omitempty"` // nil: the supervisor's own
}

// goSpec is what the daemon sends the supervisor with "go".
type goSpec struct {
	command
	Home    string `json:"home"`    // the supervisor's own (private) working directory
	LogMax  int64  `json:"log_max"` // rotate past this many bytes; 0: never
	LogKeep int    `json:"log_keep"`
	// HostProc is where the host's /proc is bound in the tree, read-only;
	// "": nowhere. Only the simulated driver's jobs need it (ownProc).
	HostProc string `json:"host_proc,omitempty"`
}

// ExitReport is what a supervisor writes to its status file when its
// command ends.
type ExitReport struct {
	Code   *int   `json:"code,omitempty"`   // the command exited with this status
	Signal int    `json:"signal,omitempty"` // the command was killed by this signal
	Error  string `json:"error,omitempty"`  // the command never ran, and why
}

// ErrNoReport means the supervisor ended without writing its status file
// (it was killed itself, or it is still running).
var ErrNoReport = errors.New("no exit report")

// ReadExitReport reads the status file a supervisor wrote at exit, at most
// a few KiB of it: a larger file is an error, never read whole.
func ReadExitReport(path string) (ExitReport, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ExitReport{}, fmt.Errorf("status %s: %w", path, ErrNoReport)
		}
		return ExitReport{}, fmt.Errorf("status %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReportBytes+1))
	switch {
	case err != nil:
		return ExitReport{}, fmt.Errorf("status %s: %w", path, err)
	case len(b) > maxReportBytes:
		return ExitReport{}, fmt.Errorf("status %s: larger than %d bytes", path, maxReportBytes)
	case len(b) == 0:
		return ExitReport{}, fmt.Errorf("status %s: %w", path, ErrNoReport)
	}
	var r ExitReport
	if err := json.Unmarshal(b, &r); err != nil {
		return ExitReport{}, fmt.Errorf("status %s: %w", path, err)
	}
	if len(r.Error) > maxReportBytes {
		r.Error = r.Error[:maxReportBytes]
	}
	return r, nil
}

// IsSupervisor reports whether this process was started as a supervisor.
func IsSupervisor() bool { return len(os.Args) > 0 && os.Args[0] == Argv0 }

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
