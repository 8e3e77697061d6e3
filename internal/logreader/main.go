package logreader

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreply"
	"github.com/gpusched/gpusched/internal/procfs"
)

// Argv0 is the name the daemon's binary is started under as a log reader.
const Argv0 = "gpusched-logreader"

// Comm is a reader's thread name (/proc/PID/comm, at most 15 bytes), which
// top, ps -o comm and the kernel's traces show: started from gpusched-init
// it would otherwise show as a supervisor.
const Comm = "gpusched-reader"

// IsReader reports whether this process was started as a log reader.
func IsReader() bool { return len(os.Args) > 0 && filepath.Base(os.Args[0]) == Argv0 }

// Request is what a reader answers: the last Lines lines (-1: all it may
// return) of the log at Path and its Keep rotated files, for the reply
// about process Name.
type Request struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Lines int    `json:"lines"`
	Keep  int    `json:"keep"`
}

// maxRequest bounds what a reader reads of its request.
const maxRequest = 64 << 10

// Main is a reader: it answers the request on stdin on stdout, or says
// why not on stderr and exits 1.
func Main() int {
	procfs.NameThreads(Comm)
	if err := answer(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Argv0, err)
		return 1
	}
	return 0
}

func answer(in io.Reader, out io.Writer) error {
	b, err := io.ReadAll(io.LimitReader(in, maxRequest+1))
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if len(b) > maxRequest {
		return fmt.Errorf("request over %d bytes", maxRequest)
	}
	var req Request
	if err := json.Unmarshal(b, &req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	t, err := logfile.Tail(context.Background(), req.Path, req.Lines, req.Keep)
	if err != nil {
		return err
	}
	reply, err := logreply.Encode(context.Background(), req.Name, t, nil)
	if err != nil {
		return err
	}
	_, err = out.Write(reply)
	return err
}
