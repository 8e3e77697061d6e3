package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/procfs"
)

// stderrTail is how much of the helper's stderr errors quote.
const stderrTail = 4096

// helperProc is one running helper process and the calls waiting on it.
type helperProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	caps   Caps
	wmu    sync.Mutex // one request line at a time

	mu      sync.Mutex
	pending map[uint64]chan helperResponse // nil once the helper has exited
	err     error                          // why it exited; set before done closes
	done    chan struct{}                  // closed once it has exited and been waited for
}

// helperError is an error the helper reported instead of its ready line.
type helperError struct {
	msg   string
	class error
}

func (e *helperError) Error() string { return "cuda helper: " + e.msg }
func (e *helperError) Unwrap() error { return e.class }

// startHelper starts the helper (own process group, killed with its parent
// thread) and waits under ctx for its ready line.
func startHelper(ctx context.Context, opts APIOptions) (*helperProc, error) {
	args := []string{HelperArgv0}
	if opts.Library != "" {
		args = append(args, opts.Library)
	}
	cmd := &exec.Cmd{
		Path:        opts.HelperPath,
		Args:        args,
		Env:         append(os.Environ(), opts.Env...),
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		WaitDelay:   time.Second,
	}
	p := &helperProc{
		cmd:     cmd,
		stderr:  newTailBuffer(stderrTail),
		pending: make(map[uint64]chan helperResponse),
		done:    make(chan struct{}),
	}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("cuda helper %s: %w", opts.HelperPath, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("cuda helper %s: %w", opts.HelperPath, err)
	}
	if err := p.start(); err != nil {
		return nil, fmt.Errorf("start cuda helper %s: %w", opts.HelperPath, err)
	}
	p.stdin = stdin
	ready := make(chan error, 1)
	go p.readLoop(stdout, ready)
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = fmt.Errorf("cuda helper %s: not ready: %w", opts.HelperPath, ctxClass(ctx.Err()))
	}
	if err != nil {
		p.kill()
		<-p.done
		return nil, err
	}
	return p, nil
}

// start starts the helper from a goroutine locked to its own OS thread,
// which lives until the helper exits: the parent-death signal follows the
// thread that forked, and a thread of the shared pool may exit any time.
// The helper is born on the CPUs the daemon gives users: it works for
// their freezes and thaws, not on the daemon's own CPUs (--daemon-cpus).
func (p *helperProc) start() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := cpuaffinity.StartOnLocked("", p.cmd.Start)
		started <- err
		if err == nil {
			<-p.done
		}
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	return <-started
}

// readLoop reads the ready line, then routes responses to their callers
// until stdout ends; then it reaps the helper and fails the pending calls.
func (p *helperProc) readLoop(stdout io.Reader, ready chan<- error) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 4096), maxRequest)
	first := true
	for sc.Scan() {
		var r helperResponse
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // not ours; the helper writes only JSON lines
		}
		if !first {
			p.deliver(r)
			continue
		}
		first = false
		switch {
		case r.Error != "":
			ready <- &helperError{msg: r.Error, class: classErr(r.Class)}
		case r.Caps == nil:
			ready <- &helperError{msg: "ready line without caps", class: ErrFailed}
		default:
			p.caps = *r.Caps
			ready <- nil
		}
	}
	if sc.Err() != nil {
		p.kill() // its answers can no longer be read
	}
	werr := p.cmd.Wait()
	msg := "exited"
	if sc.Err() != nil {
		msg = fmt.Sprintf("killed (read: %v)", sc.Err())
	} else if werr != nil {
		msg = fmt.Sprintf("exited (%v)", werr)
	}
	if tail := p.stderr.String(); tail != "" {
		msg += "; stderr: " + tail
	}
	if first {
		ready <- &helperError{msg: p.cmd.Path + " " + msg, class: ErrFailed}
	}
	p.mu.Lock()
	p.err = errors.New("cuda helper " + msg)
	p.pending = nil
	p.mu.Unlock()
	close(p.done)
}

// notSentError means a request never reached the helper, which had
// exited: it can be sent again to a new one.
type notSentError struct{ reason string }

func (e *notSentError) Error() string { return e.reason }

// deliver hands a response to the call waiting for it; a late one (its
// caller gave up) is dropped.
func (p *helperProc) deliver(r helperResponse) {
	p.mu.Lock()
	ch := p.pending[r.ID]
	delete(p.pending, r.ID)
	p.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// exited reports whether the helper has exited.
func (p *helperProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// gone reports whether the helper has exited, by its state where its
// pipes have not said so yet: a child another thread of the daemon forks
// holds copies of them until it execs, and so may keep the end of stdout
// from coming while a request written then reaches no helper. A zombie or
// a reaped helper is gone.
func (p *helperProc) gone() bool {
	if p.exited() {
		return true
	}
	st, err := procfs.ReadStat(p.cmd.Process.Pid)
	return err != nil || st.Exited()
}

// call sends req and waits for its response, the helper's death or ctx.
// Failures are *OpErrors.
func (p *helperProc) call(ctx context.Context, req helperRequest) (helperResponse, error) {
	fail := func(class error, detail string) (helperResponse, error) {
		return helperResponse{}, &OpError{Op: opName(req.Op), PID: req.PID, Err: class, Detail: detail}
	}
	ch := make(chan helperResponse, 1)
	p.mu.Lock()
	if p.pending == nil {
		err := p.err
		p.mu.Unlock()
		return helperResponse{}, &notSentError{reason: err.Error()}
	}
	p.pending[req.ID] = ch
	p.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		p.forget(req.ID)
		return fail(ErrFailed, err.Error())
	}
	p.wmu.Lock()
	_, err = p.stdin.Write(append(line, '\n'))
	p.wmu.Unlock()
	if err != nil {
		// A line shorter than PIPE_BUF is written whole or not at all: the
		// helper never saw this one. Make sure it is gone, for its reason.
		p.forget(req.ID)
		p.kill()
		<-p.done
		return helperResponse{}, &notSentError{reason: p.err.Error()}
	}
	select {
	case r := <-ch:
		return p.result(req, r)
	case <-p.done:
		select {
		case r := <-ch:
			return p.result(req, r)
		default:
			return fail(ErrFailed, p.err.Error())
		}
	case <-ctx.Done():
		p.forget(req.ID)
		return fail(ctxClass(ctx.Err()), fmt.Sprintf("no answer from the cuda helper: %v", ctx.Err()))
	}
}

// result turns an error response into an *OpError.
func (p *helperProc) result(req helperRequest, r helperResponse) (helperResponse, error) {
	if r.Error == "" {
		return r, nil
	}
	detail := r.Detail
	if detail == "" {
		detail = r.Error
	}
	return r, &OpError{Op: opName(req.Op), PID: req.PID, Err: classErr(r.Class), Detail: detail}
}

// forget drops a call that no longer waits.
func (p *helperProc) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// kill ends the helper at once.
func (p *helperProc) kill() { _ = p.cmd.Process.Signal(syscall.SIGKILL) }

// stop closes the helper's stdin, which ends it once its calls in flight
// are answered, and kills it after grace.
func (p *helperProc) stop(grace time.Duration) {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
		<-p.done
	}
}
