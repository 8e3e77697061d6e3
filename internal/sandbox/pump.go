package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpusched/gpusched/internal/logfile"
)

// drainTime bounds how long the supervisor goes on copying output after its
// command exited (a background process may hold the pipe open for ever).
const drainTime = 100 * time.Millisecond

// pump copies the command's output from a pipe into its log, holding the
// log to its cap: once a write (at most one read of the pipe, 64 KiB) takes
// it past max bytes, the log is rotated by copy-truncate (logfile.Rotate), which the log's O_APPEND descriptor
// and the daemon's followers survive. Only the supervisor writes the log,
// so its size is what was written: no sparse file, no writes of zeros.
type pump struct {
	r, w *os.File // the pipe; w goes to the command
	log  *os.File
	max  int64
	keep int
	size int64
	done chan struct{}
}

func newPump(log *os.File, max int64, keep int) (*pump, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	p := &pump{r: r, w: w, log: log, max: max, keep: keep, done: make(chan struct{})}
	if fi, err := log.Stat(); err == nil {
		p.size = fi.Size()
	}
	return p, nil
}

// run copies until every writer closed the pipe or finish ends it.
func (p *pump) run() {
	defer close(p.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := p.r.Read(buf)
		if n > 0 {
			p.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (p *pump) write(b []byte) {
	n, _ := p.log.Write(b)
	p.size += int64(n)
	if p.max > 0 && p.size > p.max {
		p.rotate()
	}
}

// rotate copy-truncates the log and gives the rotated copies back to root
// (the supervisor runs as the caller; its files would be the caller's).
// The log is found by its descriptor, not by a path kept in memory: a
// copy restored from a fork image holds the same memory but its own log.
func (p *pump) rotate() {
	path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(p.log.Fd())))
	if err == nil && !filepath.IsAbs(path) {
		err = fmt.Errorf("log descriptor names %q", path) // deleted, or not a file
	}
	if err == nil {
		err = logfile.Rotate(path, p.keep)
	}
	for i := 1; err == nil && i <= p.keep; i++ {
		if err = os.Lchown(fmt.Sprintf("%s.%d", path, i), 0, 0); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		fmt.Fprintf(p.log, "gpusched-init: log rotation: %v\n", err)
	}
	p.size = 0
	if fi, err := p.log.Stat(); err == nil {
		p.size = fi.Size()
	}
}

// finish lets the pump copy what is left for at most drainTime, then stops
// it.
func (p *pump) finish() {
	_ = p.r.SetReadDeadline(time.Now().Add(drainTime))
	<-p.done
}
