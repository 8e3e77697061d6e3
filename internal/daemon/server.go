package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/netguard"
	"github.com/gpusched/gpusched/pkg/api"
)

// Connection time limits; variables so that tests can shorten them.
var (
	// writeTimeout drops a peer that stops reading: one response line
	// that cannot be written for this long ends the connection.
	writeTimeout = 30 * time.Second
	// lineTimeout drops a peer that stalls in the middle of a request
	// line: once a line's first bytes have arrived, its newline must
	// follow within this long. A connection idle between requests is
	// never dropped (clients keep one open).
	lineTimeout = 30 * time.Second
)

// call is one request being handled.
type call struct {
	ctx    context.Context
	conn   *connScope
	actor  actor
	method string
	params json.RawMessage
	// eof, for a streaming call, is closed once the peer has shut down its
	// writing side (or gone): a stream that ends on it answers at once.
	eof <-chan struct{}
}

// decode fills v from the call's params, refusing unknown fields.
func (c *call) decode(v any) error {
	p := bytes.TrimSpace(c.params)
	if len(p) == 0 || string(p) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("%s: bad params: %v", c.method, err)
	}
	if dec.More() {
		return invalidf("%s: bad params: trailing data", c.method)
	}
	return nil
}

// handler answers a call with one result.
type handler func(c *call) (any, error)

// streamHandler answers a call with events and then one result.
type streamHandler func(c *call, stream *eventStream) (any, error)

type method struct {
	unary  handler
	stream streamHandler
	turn   bool // a quick call: a non-root user waits for a turn (limits.Turns) before it is answered
	// bulk: the call is bulk work (a submission, a removal: thousands of
	// files for one call), in one of its user's turns, under the bulk
	// gate and charged to --max-cpu-per-user (enterBulk).
	bulk bool
	// metered: the call is held to --max-cpu-per-user as bulk work is,
	// without a slot of the bulk gate (a process start waits on its child
	// more than it computes): a user over their share waits before it, and
	// it is charged what it took.
	metered bool
	// admit, when set, refuses a caller whose caps refuse the call
	// whatever its params say, before they are decoded: a user at its cap
	// who sends commands of 256 KiB costs the daemon no decoding of them.
	admit func(a actor) error
}

// connAcceptor is what serve needs of its listener: the next connection
// admitted to the connection caps, with its peer's uid (a
// netguard.Acceptor with admitConn for its verdict).
type connAcceptor interface {
	Accept() (net.Conn, uint32, error)
}

// serve accepts connections until the listener closes. Accept errors (such
// as running out of descriptors) are retried with a backoff and logged once
// per run of them.
func (d *Daemon) serve(ctx context.Context, ln connAcceptor) error {
	retry := netguard.NewRetry(func(err error) {
		d.log.Error("accept failing; retrying with backoff", zap.String("socket", d.cfg.Socket), zap.Error(err))
	})
	for {
		c, uid, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || !retry.Failed(err, ctx.Done()) {
				return nil
			}
			continue
		}
		retry.Succeeded()
		d.conns.track(c, uid)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.conns.remove(c)
			d.serveConn(ctx, c.(*net.UnixConn))
		}()
	}
}

// admitConn is the socket's verdict on a connection just accepted, by its
// descriptor: admitted as a connection of the uid the kernel gives for its
// peer (conns.go), or refused with one line that says why. A flood of
// connections is refused at the rate it comes, each for a few system
// calls (netguard.Acceptor).
func (d *Daemon) admitConn(fd int) (uint32, []byte, bool) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, refusalLine(fmt.Errorf("cannot identify peer: SO_PEERCRED: %w", err)), false
	}
	if err := d.conns.admit(cred.Uid, func() string { return d.names.name(cred.Uid) }); err != nil {
		return 0, refusalLine(err), false
	}
	return cred.Uid, nil, true
}

// refusalLine is the line a refused connection is sent: err's answer, as
// lineWriter.response writes it.
func refusalLine(err error) []byte {
	code, msg := toWire(err)
	quoted, _ := encodeResult(msg) // a string always encodes
	line := append([]byte(`{"ok":false,"error":`), quoted...)
	line = append(line, `,"code":`...)
	line = strconv.AppendQuote(line, string(code))
	return append(line, "}\n"...)
}

// serveConn reads requests one per line and answers them in order. While a
// streaming call runs, holding one of its user's --max-streams-per-user
// slots, the next line is read ahead but handled only after the stream
// ends. A peer that half-closes (shutdown of its write side, as
// `echo ... | socat` does) still gets its stream to the end; a peer that is
// gone cancels it.
func (d *Daemon) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	w := newLineWriter(c, connWriteBytes)
	a, err := peerActor(c, &d.names)
	if err != nil {
		d.log.Warn("peer credentials", zap.Error(err))
		_ = w.response(nil, nil, &api.Error{Code: api.CodeInternal, Message: "cannot identify peer: " + err.Error()})
		return
	}
	traceConn(ctx, a.UID)
	scope := &connScope{}
	defer scope.close()
	r := newLineReader(&stallReader{c: c}, func() (func(), error) { return d.conns.longLine(a.UID) })
	defer r.release()
	var stream *activeStream
	for {
		line, err := r.next()
		var tooLong *lineTooLong
		stalled := errors.Is(err, os.ErrDeadlineExceeded)
		if stream != nil {
			switch {
			case stalled:
				stream.cancel() // the peer is broken; nobody reads the rest
			case err != nil && !errors.As(err, &tooLong) && !errors.As(err, new(linesOverBudget)):
				close(stream.eof)
				stream.peerClosedWrite(c)
			}
			<-stream.done
			stream = nil
		}
		switch {
		case errors.As(err, &tooLong):
			d.metrics.request(methodUnknown, string(api.CodeTooLarge))
			if w.response(nil, nil, &api.Error{Code: api.CodeTooLarge, Message: tooLong.Error()}) != nil {
				return
			}
			continue
		case errors.As(err, new(linesOverBudget)):
			d.metrics.request(methodUnknown, string(api.CodeResourceExhausted))
			if w.response(nil, nil, &api.Error{Code: api.CodeResourceExhausted, Message: err.Error()}) != nil {
				return
			}
			continue
		case stalled:
			d.metrics.request(methodUnknown, string(api.CodeBadRequest))
			_ = w.response(nil, nil, api.Errorf(api.CodeBadRequest, "request line unfinished after %v: closing the connection", lineTimeout))
			return
		case err != nil:
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				d.log.Debug("read", zap.Error(err))
			}
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if refused, err := d.refuseAtCap(ctx, w, a, line); refused {
			if err != nil {
				return
			}
			continue
		}
		req, m, perr := d.parseRequest(line)
		if perr != nil {
			d.metrics.request(methodUnknown, string(perr.Code))
			if w.response(req.ID, nil, perr) != nil {
				return
			}
			continue
		}
		if m.admit != nil {
			if err := m.admit(a); err != nil {
				if d.answer(w, &call{ctx: ctx, actor: a, method: req.Method}, req.ID, nil, err) != nil {
					return
				}
				continue
			}
		}
		if m.stream != nil {
			release, err := d.streamCap.Take(a.UID, a.User)
			if err != nil {
				if d.answer(w, &call{ctx: ctx, actor: a, method: req.Method}, req.ID, nil, err) != nil {
					return
				}
				continue
			}
			sctx, cancel := context.WithCancel(ctx)
			stream = &activeStream{cancel: cancel, done: make(chan struct{}), eof: make(chan struct{})}
			cl := &call{ctx: sctx, conn: scope, actor: a, method: req.Method, params: req.Params, eof: stream.eof}
			d.streams.Add(1)
			go func(st *activeStream) {
				defer d.streams.Done()
				defer close(st.done)
				defer st.cancel()
				res, err := m.stream(cl, &eventStream{w: w, id: req.ID})
				release() // before the final line, after which the caller may start another
				if d.answer(w, cl, req.ID, res, err) != nil {
					// Gone, or not reading (the write timed out, maybe
					// mid-line): the connection is done. Closing it ends
					// the read ahead, which may never see the peer leave.
					c.Close()
				}
			}(stream)
			continue
		}
		cl := &call{ctx: ctx, conn: scope, actor: a, method: req.Method, params: req.Params}
		if d.answerUnary(w, cl, req.ID, m) != nil {
			return
		}
	}
}

// answerUnary answers a unary call; a quick one, handler and reply both,
// in one of its user's turns; bulk work's handler in a turn and a slot of
// the bulk gate, given back before the reply, which a long listing writes
// in slots of its own; a metered one's handler charged to its user's
// share.
func (d *Daemon) answerUnary(w *lineWriter, c *call, id json.RawMessage, m method) error {
	defer traceCall(c.ctx, c.method)()
	switch {
	case m.turn:
		release, err := d.turns.Take(c.ctx, c.actor.UID)
		if err != nil {
			return err // shutting down
		}
		defer release()
	case m.bulk, m.metered:
		leave, err := d.charged(c, m.bulk)
		if err != nil {
			return d.answer(w, c, id, nil, err)
		}
		res, err := m.unary(c)
		leave()
		return d.answer(w, c, id, res, err)
	}
	res, err := m.unary(c)
	return d.answer(w, c, id, res, err)
}

// charged holds c to its user's share of the daemon's CPU
// (--max-cpu-per-user): bulk work in a turn and a slot of the bulk gate
// (enterBulk), a metered call on its thread, outside the gate (Meter).
// leave ends it, charging what it took.
func (d *Daemon) charged(c *call, bulk bool) (leave func(), err error) {
	if bulk {
		_, leave, err = d.enterBulk(c)
		return leave, err
	}
	return d.bulk.Meter(c.ctx, c.actor.UID)
}

// turnsPerUser is --max-busy-per-user in effect: 0 is half the daemon's
// CPUs, so that one user's quick calls leave the others a CPU.
func turnsPerUser(n int) int {
	if n > 0 {
		return n
	}
	return max(runtime.GOMAXPROCS(0)/2, 1)
}

// stallReader reads a connection for the request reader, and bounds how
// long a request line may stall: while bytes of an unfinished line have
// been read, the read deadline is lineTimeout from the first of them;
// between lines there is none.
type stallReader struct {
	c       net.Conn
	partial bool // the last byte read was not a newline
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.c.Read(p)
	if n > 0 {
		if partial := p[n-1] != '\n'; partial != s.partial {
			s.partial = partial
			var deadline time.Time
			if partial {
				deadline = time.Now().Add(lineTimeout)
			}
			_ = s.c.SetReadDeadline(deadline)
		}
	}
	return n, err
}

// hangupCheck is how often a half-closed peer with a stream still running
// is checked for having gone away entirely.
const hangupCheck = time.Second

// activeStream is a streaming call in progress on a connection.
type activeStream struct {
	cancel context.CancelFunc
	done   chan struct{}
	eof    chan struct{} // closed when the peer shuts down its writing side
}

// peerClosedWrite handles EOF while streaming: a peer that is gone cancels
// the stream; one that only shut its write side keeps it, until it hangs up.
func (st *activeStream) peerClosedWrite(c *net.UnixConn) {
	if hungUp(c) {
		st.cancel()
		return
	}
	go func() {
		t := time.NewTicker(hangupCheck)
		defer t.Stop()
		for {
			select {
			case <-st.done:
				return
			case <-t.C:
				if hungUp(c) {
					st.cancel()
					return
				}
			}
		}
	}()
}

// hungUp reports whether the peer closed both directions (POLLHUP), as
// opposed to shutting down only its writing side.
func hungUp(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		if _, err := unix.Poll(fds, 0); err == nil {
			gone = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return gone
}

// parseRequest decodes one request line, its params left undecoded, and
// finds its method, with req.Method set to the canonical name; a failure
// is the wire error to answer with.
func (d *Daemon) parseRequest(line []byte) (api.Request, method, *api.Error) {
	var req api.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return api.Request{}, method{}, api.Errorf(api.CodeBadRequest, "malformed request: %v", err)
	}
	if len(req.ID) > api.MaxIDBytes {
		return api.Request{}, method{}, api.Errorf(api.CodeBadRequest, "request id of %d bytes: at most %d", len(req.ID), api.MaxIDBytes)
	}
	name, m, ok := d.methodNamed(req.Method)
	switch {
	case req.Method == "":
		return req, method{}, api.Errorf(api.CodeBadRequest, "request has no method")
	case !ok:
		return req, method{}, api.Errorf(api.CodeUnknownMethod, "unknown method %q", req.Method)
	}
	req.Method = name
	return req, m, nil
}

// methodNamed finds a method by its name or an alias of it, and gives its
// canonical name.
func (d *Daemon) methodNamed(name string) (string, method, bool) {
	if alias, ok := api.MethodAliases[name]; ok {
		name = alias
	}
	m, ok := d.methods[name]
	return name, m, ok
}

// answer writes the final response, mapping err to its wire code.
func (d *Daemon) answer(w *lineWriter, c *call, id json.RawMessage, res any, err error) error {
	if err == nil {
		d.metrics.request(c.method, codeOK)
		return w.response(id, res, nil)
	}
	var gone *peerGoneError
	if errors.As(err, &gone) {
		d.metrics.request(c.method, codeCanceled)
		return err // nobody to answer, and nothing to log as a failure
	}
	if c.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		if !d.stopping.Load() {
			d.metrics.request(c.method, codeCanceled)
			return err // the peer left; nobody to answer
		}
		err = api.Errorf(api.CodeUnavailable, "gpuschedd is shutting down; %s ended early (reconnect once it is back)", c.method)
	}
	code, msg := toWire(err)
	d.metrics.request(c.method, string(code))
	if code == api.CodeInternal {
		d.log.Error("request failed", zap.String("method", c.method), zap.Uint32("uid", c.actor.UID), zap.Error(err))
	}
	return w.response(id, nil, &api.Error{Code: code, Message: msg})
}
