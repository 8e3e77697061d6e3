package checkpoint

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// HelperArgv0 is the argv[0] under which the gpuschedd binary runs as the
// driver API helper: the long-lived process that loads libcuda, pays cuInit
// once, and serves checkpoint calls for the daemon.
const HelperArgv0 = "gpusched-cudahelper"

// EnvLibrary names the driver library the helper opens when its command
// line names none (debug and test knob).
const EnvLibrary = "GPUSCHED_LIBCUDA"

// maxRequest bounds one request line.
const maxRequest = 1 << 20

// IsHelper reports whether this process was started as the helper.
func IsHelper() bool { return len(os.Args) > 0 && filepath.Base(os.Args[0]) == HelperArgv0 }

// HelperMain runs the helper: "gpusched-cudahelper [LIBRARY]". It serves
// requests from stdin until stdin closes and returns the exit status. It
// ignores terminal and termination signals: its life is bound to the
// daemon's by stdin and the parent-death signal.
func HelperMain() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	path := os.Getenv(EnvLibrary)
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if err := serveHelper(path, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", HelperArgv0, err)
		return 1
	}
	return 0
}

// serveHelper opens the library, writes the ready line and answers each
// request in its own goroutine, so that a slow call on one pid delays no
// other. It returns once stdin has closed and every answer is written.
func serveHelper(path string, in io.Reader, out io.Writer) error {
	w := &lineWriter{w: out}
	lib, err := openLibcuda(path)
	if err != nil {
		_ = w.write(errorResponse(0, err))
		return err
	}
	caps := lib.caps()
	if err := w.write(helperResponse{Caps: &caps}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), maxRequest)
	var wg sync.WaitGroup
	defer wg.Wait()
	for sc.Scan() {
		var req helperRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			_ = w.write(helperResponse{Error: fmt.Sprintf("bad request: %v", err), Class: "failed"})
			continue
		}
		wg.Go(func() { _ = w.write(lib.serve(req)) })
	}
	return sc.Err()
}

// serve answers one request.
func (l *libcuda) serve(req helperRequest) helperResponse {
	resp := helperResponse{ID: req.ID}
	if req.Op == opCaps {
		c := l.caps()
		resp.Caps = &c
		return resp
	}
	if req.PID <= 0 || req.PID > 1<<31-1 {
		return errorResponse(req.ID, &OpError{Op: opName(req.Op), PID: req.PID, Err: ErrNotCUDA, Detail: "bad pid"})
	}
	var err error
	switch req.Op {
	case opState:
		resp.State, err = l.State(req.PID)
	case opLock:
		err = l.Lock(req.PID, time.Duration(req.TimeoutMS)*time.Millisecond)
	case opCheckpoint:
		err = l.Checkpoint(req.PID)
	case opRestore:
		err = l.Restore(req.PID, req.Pairs)
	case opUnlock:
		err = l.Unlock(req.PID)
	case opRestoreTID:
		resp.TID, err = l.RestoreThreadID(req.PID)
	default:
		err = fmt.Errorf("unknown op %q: %w", req.Op, ErrUnsupported)
	}
	if err != nil {
		return errorResponse(req.ID, err)
	}
	return resp
}

// lineWriter writes one JSON object per line, one write per line.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, err = lw.w.Write(append(b, '\n'))
	return err
}
