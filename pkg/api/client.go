package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrDaemonNotRunning is returned by Dial when nothing listens on the socket.
var ErrDaemonNotRunning = errors.New("gpusched daemon is not running")

// SocketPath resolves the socket: explicit path, then $GPUSCHED_SOCKET,
// then DefaultSocket.
func SocketPath(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// startHint says how to start a daemon that serves path.
func startHint(path string) string {
	if path == DefaultSocket {
		return "start it with `gpuschedd --sim 1` to try it without a GPU, or `systemctl start gpuschedd`; or point --socket or $" + SocketEnv + " at the socket it serves"
	}
	return fmt.Sprintf("start it with `gpuschedd --socket %s --sim 1` to try it without a GPU; or point --socket or $%s at the socket it serves", path, SocketEnv)
}

// Client is one connection to the daemon. Calls on a Client are serialized;
// open more Clients for parallelism. A streaming call occupies the Client
// until it ends.
type Client struct {
	path string
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	next int64
	err  error       // sticky: set when the connection can no longer be used
	held atomic.Bool // the connection holds an activation (Hold)
}

// Dial connects to the daemon's socket (see SocketPath).
func Dial(ctx context.Context, path string) (*Client, error) {
	path = SocketPath(path)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s (%s)", ErrDaemonNotRunning, path, startHint(path))
		}
		return nil, fmt.Errorf("connect to gpusched at %s: %w", path, err)
	}
	return &Client{
		path: path,
		conn: conn,
		r:    bufio.NewReaderSize(conn, 64<<10),
		w:    bufio.NewWriterSize(conn, 16<<10),
	}, nil
}

// Close closes the connection. A Client that holds an activation (Hold)
// first shuts down its writing side and waits (at most releaseWait) for the
// daemon's final line, which comes once the hold has ended: after Close, no
// activation sees it held.
func (c *Client) Close() error {
	if c.held.Load() {
		if cw, ok := c.conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = c.conn.SetReadDeadline(time.Now().Add(releaseWait))
			_, _ = io.Copy(io.Discard, c.r) // the final line, then EOF
		}
	}
	return c.conn.Close()
}

// releaseWait bounds how long Close waits for the daemon to end a hold.
const releaseWait = 10 * time.Second

// Call sends one request and decodes the result into result (unless nil).
// A failed call returns an *Error carrying the wire code.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.Stream(ctx, method, params, nil, result)
}

// Stream sends one request, hands every streamed event to onEvent (which may
// stop the stream by returning an error) and decodes the final result.
func (c *Client) Stream(ctx context.Context, method string, params any, onEvent func(*Event) error, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.next++
	id := strconv.AppendInt(nil, c.next, 10)
	req := Request{ID: id, Method: method}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("encode %s params: %w", method, err)
		}
		req.Params = p
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	if err := c.send(&req); err != nil {
		if refused := c.refusal(err); refused != nil {
			return c.broken(ctx, refused)
		}
		return c.broken(ctx, err)
	}
	for {
		line, err := c.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			line, err = c.readLong(line)
		}
		if err != nil {
			return c.broken(ctx, err)
		}
		var l Line
		if err := json.Unmarshal(line, &l); err != nil {
			return c.broken(ctx, fmt.Errorf("decode response to %s: %w", method, err))
		}
		if l.Event != nil {
			if onEvent != nil {
				if err := onEvent(l.Event); err != nil {
					var held *heldError
					if errors.As(err, &held) {
						c.err = held // the stream goes on for as long as the connection
						c.held.Store(true)
						return nil
					}
					// The server is still streaming: this connection is done.
					c.err = fmt.Errorf("connection closed after an aborted %s stream", method)
					_ = c.conn.Close()
					return err
				}
			}
			continue
		}
		if !l.OK {
			return &Error{Code: l.Code, Message: l.Error}
		}
		if result != nil && len(l.Result) > 0 {
			if err := json.Unmarshal(l.Result, result); err != nil {
				return fmt.Errorf("decode %s result: %w", method, err)
			}
		}
		return nil
	}
}

// heldError, returned by an onEvent, ends a Stream call but not its
// stream: the Client stays occupied by it (Hold), and every later call
// fails with this error.
type heldError struct{ name string }

func (e *heldError) Error() string {
	return fmt.Sprintf("this connection holds %q: it carries nothing else; Close it to release the hold", e.name)
}

func (c *Client) send(req *Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := c.w.Write(b); err != nil {
		return err
	}
	return c.w.Flush()
}

// refusal is the error line the daemon wrote before it closed the
// connection, when that close made a request fail to send (sendErr): a
// connection past one of the daemon's caps is answered at once, unasked,
// and closed. Nil when there is none.
func (c *Client) refusal(sendErr error) *Error {
	if !errors.Is(sendErr, syscall.EPIPE) && !errors.Is(sendErr, syscall.ECONNRESET) {
		return nil
	}
	line, err := c.r.ReadSlice('\n') // the peer is gone: what it wrote is here, then EOF
	if err != nil {
		return nil
	}
	var l Line
	if json.Unmarshal(line, &l) != nil || l.OK || l.Event != nil || l.Code == "" {
		return nil
	}
	return &Error{Code: l.Code, Message: l.Error}
}

// readLong continues a line longer than the read buffer.
func (c *Client) readLong(first []byte) ([]byte, error) {
	buf := append([]byte(nil), first...)
	for {
		more, err := c.r.ReadSlice('\n')
		buf = append(buf, more...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

// broken marks the connection unusable and explains why.
func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if errors.Is(err, io.EOF) {
		err = fmt.Errorf("daemon closed the connection: %w", err)
	}
	c.err = fmt.Errorf("connection to %s unusable: %w", c.path, err)
	_ = c.conn.Close()
	return err
}
