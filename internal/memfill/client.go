package memfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/procfs"
	"golang.org/x/sys/unix"
)

// exitGrace is how long a Filler whose spawned helper closed its stdout
// waits for the exit status to quote it.
const exitGrace = 2 * time.Second

// Options configure a filler's helper.
type Options struct {
	Path     string // the binary re-executed as the helper: the daemon's own executable
	Backend  string // "sim" or "cuda"
	UUID     string // the GPU
	SimDir   string // the sim directory (sim backend)
	Library  string // the driver library (cuda backend); "" is DefaultLibrary
	ChunkMiB uint64 // the allocation chunk; 0 is DefaultChunkMiB
	// Socket is the rendezvous socket through which a later daemon adopts
	// the helper; "" allows no adoption.
	Socket string
	// LogPath is the helper's stderr, appended to; "" discards it. Errors
	// quote what the helper wrote there.
	LogPath string
	// Tick is the helper's control loop period and Orphan how long it holds
	// on without a controller; 0 is DefaultTick, DefaultOrphan.
	Tick, Orphan time.Duration
	// Env is added to the helper's environment, for example
	// CUDA_VISIBLE_DEVICES=<uuid> for the cuda backend.
	Env []string
	// OnState is called, from the Filler's reader goroutine, with every
	// state the helper reports (replies and changes of its hold) that is
	// newer than the last one. It must not block.
	OnState func(State)
}

// args is the helper's command line.
func (o Options) args() []string {
	args := []string{HelperArgv0, "--backend", o.Backend, "--gpu", o.UUID}
	add := func(flag, v string) {
		if v != "" && v != "0" && v != "0s" {
			args = append(args, flag, v)
		}
	}
	add("--chunk", strconv.FormatUint(o.ChunkMiB, 10))
	add("--socket", o.Socket)
	add("--sim-dir", o.SimDir)
	add("--library", o.Library)
	add("--tick", o.Tick.String())
	add("--orphan", o.Orphan.String())
	return args
}

// Filler is the daemon's handle on one filler helper, spawned or adopted.
// Its methods are safe for concurrent use.
type Filler struct {
	o      Options
	conn   io.ReadWriteCloser
	logOff int64      // the log's size when the helper was reached: errors quote what follows
	ready  chan error // the hello, or why none came
	hello  hello      // set before ready is sent nil

	// A spawned helper is reaped by a goroutine; an adopted one is watched
	// through a pidfd.
	exited  chan struct{} // closed once reaped; nil when adopted
	waitErr error         // set before exited closes
	pidfd   *os.File      // nil when spawned

	wmu       sync.Mutex // one request line at a time
	ids       atomic.Uint64
	releaseID atomic.Uint64 // the release request's id

	mu      sync.Mutex
	state   State
	pending map[uint64]chan message // nil once the connection has ended
	closing bool                    // the connection's end is ours: Detach, or a release answered
	reason  string                  // the helper's parting error line
	err     error                   // why the connection ended; set before done closes
	done    chan struct{}
}

func newClient(o Options, c io.ReadWriteCloser, logOff int64) *Filler {
	return &Filler{o: o, conn: c, logOff: logOff, ready: make(chan error, 1),
		pending: make(map[uint64]chan message), done: make(chan struct{})}
}

// Start spawns a helper in a session of its own, so that it outlives the
// daemon, and waits under ctx for its hello. The helper holds nothing
// until the first Set. A missing backend is ErrUnsupported.
func Start(ctx context.Context, o Options) (*Filler, error) {
	if o.Path == "" {
		return nil, fmt.Errorf("filler %s: no helper path", o.UUID)
	}
	logf, off, err := openLog(o.LogPath)
	if err != nil {
		return nil, fmt.Errorf("filler %s: %w", o.UUID, err)
	}
	defer logf.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("filler %s: %w", o.UUID, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("filler %s: %w", o.UUID, err)
	}
	cmd := &exec.Cmd{
		Path:        o.Path,
		Args:        o.args(),
		Env:         append(os.Environ(), o.Env...),
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      logf,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cpuaffinity.StartOn("", cmd.Start) // it holds memory for users' work, off the daemon's own CPUs
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("filler %s: start %s: %w", o.UUID, o.Path, err)
	}
	f := newClient(o, &pipeConn{r: outR, w: inW}, off)
	f.exited = make(chan struct{})
	go func() {
		f.waitErr = cmd.Wait()
		close(f.exited)
	}()
	go f.read(outR)
	if err := f.handshake(ctx); err != nil {
		_ = cmd.Process.Kill()
		<-f.done
		return nil, err
	}
	return f, nil
}

// Adopt connects to the rendezvous socket of a running helper, which
// drops its previous controller, and reads its hello under ctx. No helper
// listening there is ErrGone.
func Adopt(ctx context.Context, o Options) (*Filler, error) {
	off, err := logSize(o.LogPath)
	if err != nil {
		return nil, fmt.Errorf("filler %s: %w", o.UUID, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", o.Socket)
	if err != nil {
		return nil, fmt.Errorf("filler %s: adopt: %v: %w", o.UUID, err, ErrGone)
	}
	f := newClient(o, c, off)
	go f.read(c)
	if err := f.handshake(ctx); err != nil {
		_ = c.Close()
		<-f.done
		return nil, err
	}
	if err := f.watch(); err != nil {
		_ = f.Detach()
		return nil, fmt.Errorf("filler %s: adopt: %w", o.UUID, err)
	}
	return f, nil
}

// watch checks the adopted helper's hello and opens a pidfd on it.
func (f *Filler) watch() error {
	if f.hello.UUID != f.o.UUID {
		return fmt.Errorf("the helper on %s fills %s", f.o.Socket, f.hello.UUID)
	}
	fd, err := unix.PidfdOpen(f.hello.PID, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("pidfd of helper %d: %w", f.hello.PID, err)
	}
	f.mu.Lock()
	f.pidfd = os.NewFile(uintptr(fd), "pidfd")
	f.mu.Unlock()
	// The pidfd is the helper's unless the pid was reused before it opened.
	if start, err := procfs.StartTime(f.hello.PID); err != nil || !procfs.SameStart(start, f.hello.Start) {
		return fmt.Errorf("helper %d: %w", f.hello.PID, ErrGone)
	}
	return nil
}

// handshake waits under ctx for the hello.
func (f *Filler) handshake(ctx context.Context) error {
	select {
	case err := <-f.ready:
		return err
	case <-ctx.Done():
		return fmt.Errorf("filler %s: no hello from the helper: %w", f.o.UUID, ctx.Err())
	}
}

// PID returns the helper's host pid.
func (f *Filler) PID() int { return f.hello.PID }

// StartTime returns the helper's start time, clock ticks after boot: with
// PID, its identity.
func (f *Filler) StartTime() uint64 { return f.hello.Start }

// ChunkMiB returns the helper's allocation chunk.
func (f *Filler) ChunkMiB() uint64 { return f.hello.ChunkMiB }

// State returns the last state the helper reported.
func (f *Filler) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// Done is closed once the connection has ended: the helper died, it broke,
// or Detach or Release ended it.
func (f *Filler) Done() <-chan struct{} { return f.done }

// Err returns why the connection ended (ErrGone), or nil while it lasts
// and after a Detach or a Release.
func (f *Filler) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Set holds the GPU's total usage at targetMiB with reserveMiB kept free
// on top, and returns once the helper has applied it: memory a raised
// reserve asks for is free by then, unless the filler holds nothing more
// (the state tells). If ctx ends first the helper still applies it.
func (f *Filler) Set(ctx context.Context, targetMiB, reserveMiB uint64) (State, error) {
	m, err := f.call(ctx, request{ID: f.ids.Add(1), Op: opSet, TargetMiB: &targetMiB, ReserveMiB: &reserveMiB})
	if err != nil {
		return State{}, err
	}
	return *m.State, nil
}

// Status asks the helper for its state, the device's memory read afresh.
func (f *Filler) Status(ctx context.Context) (State, error) {
	m, err := f.call(ctx, request{ID: f.ids.Add(1), Op: opStatus})
	if err != nil {
		return State{}, err
	}
	return *m.State, nil
}

// Release makes the helper free everything and exit, and returns once it
// has exited: reaped when spawned, its pid gone when adopted.
func (f *Filler) Release(ctx context.Context) error {
	id := f.ids.Add(1)
	f.releaseID.Store(id)
	if _, err := f.call(ctx, request{ID: id, Op: opRelease}); err != nil {
		return err
	}
	var err error
	select {
	case <-f.done:
		if f.exited != nil {
			select {
			case <-f.exited:
			case <-ctx.Done():
				err = ctx.Err()
			}
		} else {
			err = waitExit(ctx, f.pidfd)
			f.pidfd.Close()
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("filler %s: release: helper %d not gone: %w", f.o.UUID, f.hello.PID, err)
	}
	return nil
}

// Detach drops the connection and leaves the helper holding with its last
// parameters, waiting to be adopted (daemon shutdown). A spawned helper is
// not killed. It returns Err: non-nil if the helper was already gone.
func (f *Filler) Detach() error {
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	_ = f.conn.Close()
	<-f.done
	if f.pidfd != nil {
		f.pidfd.Close()
	}
	return f.Err()
}

// call sends req and waits for its reply, the connection's end or ctx.
func (f *Filler) call(ctx context.Context, req request) (message, error) {
	ch := make(chan message, 1)
	f.mu.Lock()
	if f.pending == nil {
		f.mu.Unlock()
		return message{}, f.gone(req.Op)
	}
	f.pending[req.ID] = ch
	f.mu.Unlock()
	line, err := json.Marshal(req)
	if err == nil {
		f.wmu.Lock()
		_, err = f.conn.Write(append(line, '\n'))
		f.wmu.Unlock()
	}
	if err != nil {
		f.forget(req.ID)
		return message{}, fmt.Errorf("filler %s: %s: %v: %w", f.o.UUID, req.Op, err, ErrGone)
	}
	var m message
	select {
	case m = <-ch:
	case <-f.done:
		select {
		case m = <-ch:
		default:
			return message{}, f.gone(req.Op)
		}
	case <-ctx.Done():
		f.forget(req.ID)
		return message{}, fmt.Errorf("filler %s: %s: %w", f.o.UUID, req.Op, ctx.Err())
	}
	switch {
	case m.Error != "":
		return m, fmt.Errorf("filler %s: %s: %s", f.o.UUID, req.Op, m.Error)
	case m.State == nil:
		return m, fmt.Errorf("filler %s: %s: reply without a state", f.o.UUID, req.Op)
	}
	return m, nil
}

// gone is the error of a call on an ended connection: why it ended.
func (f *Filler) gone(op string) error {
	if err := f.Err(); err != nil {
		return err
	}
	return fmt.Errorf("filler %s: %s: connection closed: %w", f.o.UUID, op, ErrGone)
}

// forget drops a call that no longer waits.
func (f *Filler) forget(id uint64) {
	f.mu.Lock()
	delete(f.pending, id)
	f.mu.Unlock()
}

// pipeConn is a spawned helper's stdout and stdin, seen from the daemon.
type pipeConn struct{ r, w *os.File }

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeConn) Close() error                { return errors.Join(p.r.Close(), p.w.Close()) }
