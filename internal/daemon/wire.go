package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// lineWriter writes one JSON object per line, flushing each.
type lineWriter struct {
	mu   sync.Mutex
	conn net.Conn
	bw   *bufio.Writer
	buf  bytes.Buffer
	enc  *json.Encoder
}

// connWriteBytes is a served connection's write buffer. Every line is
// written through at its end (a stream's events as they come), so the
// buffer only joins a line's pieces; a larger piece goes to the
// connection directly.
const connWriteBytes = 4 << 10

// newLineWriter buffers size bytes of c's lines (longer ones are written
// through).
func newLineWriter(c net.Conn, size int) *lineWriter {
	w := &lineWriter{conn: c, bw: bufio.NewWriterSize(c, size)}
	w.enc = json.NewEncoder(&w.buf)
	w.enc.SetEscapeHTML(false)
	return w
}

// encoded is a result already encoded as one compact JSON value (by
// encodeResult): it is written as it is, where a json.RawMessage would be
// validated and compacted again.
type encoded []byte

// encodeResult encodes v as the line writer would, without the newline.
func encodeResult(v any) (encoded, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return encoded(b.Bytes()[:b.Len()-1]), nil
}

// begin starts a line: `{` and the echoed id, if any.
func (w *lineWriter) begin(id json.RawMessage) {
	w.buf.Reset()
	w.buf.WriteByte('{')
	if len(id) > 0 {
		w.buf.WriteString(`"id":`)
		w.buf.Write(id)
		w.buf.WriteByte(',')
	}
}

// response writes {"id":..,"ok":true,"result":..} or the error form.
func (w *lineWriter) response(id json.RawMessage, result any, e *api.Error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begin(id)
	if e != nil {
		w.buf.WriteString(`"ok":false,"error":`)
		if err := w.enc.Encode(e.Message); err != nil {
			return err
		}
		w.trimNewline()
		w.buf.WriteString(`,"code":`)
		w.buf.WriteString(strconv.Quote(string(e.Code)))
	} else {
		w.buf.WriteString(`"ok":true`)
		if pw, ok := result.(piecewise); ok {
			w.buf.WriteString(`,"result":`)
			return w.pieces(pw)
		}
		if raw, ok := result.(encoded); ok {
			w.buf.WriteString(`,"result":`)
			return w.flushAround(raw)
		}
		if result != nil {
			w.buf.WriteString(`,"result":`)
			if err := w.enc.Encode(result); err != nil {
				return err
			}
			w.trimNewline()
		}
	}
	w.buf.WriteString("}\n")
	return w.flush()
}

func (w *lineWriter) trimNewline() { w.buf.Truncate(w.buf.Len() - 1) }

// maxKeptLine is the largest line buffer a connection keeps between lines:
// a larger one (a reply of MiBs) goes once written, so that open
// connections do not each hold their largest reply.
const maxKeptLine = 64 << 10

func (w *lineWriter) flush() error {
	defer w.dropLarge()
	_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return w.send(true)
}

// flushAround ends the line begun in the buffer with raw and "}\n" and
// writes it through, raw passed on to the connection as it is: a `logs`
// reply of a MiB, already encoded, is not copied into the buffer again.
func (w *lineWriter) flushAround(raw encoded) error {
	_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := w.send(false); err != nil {
		return err
	}
	if _, err := w.bw.Write(raw); err != nil {
		return &peerGoneError{err}
	}
	w.buf.WriteString("}\n")
	return w.send(true)
}

// send passes the buffer on to the connection, all of it written through
// when end is set.
func (w *lineWriter) send(end bool) error {
	_, err := w.bw.Write(w.buf.Bytes())
	w.buf.Reset()
	if err == nil && end {
		err = w.bw.Flush()
	}
	if err != nil {
		return &peerGoneError{err}
	}
	return nil
}

// dropLarge lets a line buffer over maxKeptLine go once its line is written.
func (w *lineWriter) dropLarge() {
	if w.buf.Cap() > maxKeptLine {
		w.buf = bytes.Buffer{} // enc writes to &w.buf, which stays valid
	}
}

// piecewise is a result written in pieces (listReply): encode writes its
// JSON value to out with enc, calling send whenever out holds a piece to
// pass on to the connection.
type piecewise interface {
	encode(enc *json.Encoder, out *bytes.Buffer, send func() error) error
}

// pieces ends the line begun with pw's result, written a piece at a time;
// the whole line has writeTimeout, as a line written at once. A line cut
// short by a failure cannot be finished: the connection is done.
func (w *lineWriter) pieces(pw piecewise) error {
	defer w.dropLarge()
	_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := pw.encode(w.enc, &w.buf, func() error { return w.send(false) }); err != nil {
		return fmt.Errorf("reply cut short: %w", err)
	}
	w.buf.WriteString("}\n")
	return w.send(true)
}

// peerGoneError is a failed write to the connection: the peer hung up or
// stopped reading, and nothing more can be said to it. A method that
// fails so (a stream to a client that went away) did nothing wrong.
type peerGoneError struct{ err error }

func (e *peerGoneError) Error() string { return e.err.Error() }
func (e *peerGoneError) Unwrap() error { return e.err }

func itoa(n int) string { return strconv.Itoa(n) }
