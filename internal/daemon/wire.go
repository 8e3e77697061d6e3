package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
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
		if raw, ok := result.(encoded); ok {
			w.buf.WriteString(`,"result":`)
			w.buf.Write(raw)
		} else if result != nil {
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

// event writes {"id":..,"event":..}.
func (w *lineWriter) event(id json.RawMessage, e *api.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begin(id)
	w.buf.WriteString(`"event":`)
	if err := w.enc.Encode(e); err != nil {
		return err
	}
	w.trimNewline()
	w.buf.WriteString("}\n")
	return w.flush()
}

func (w *lineWriter) trimNewline() { w.buf.Truncate(w.buf.Len() - 1) }

// maxKeptLine is the largest line buffer a connection keeps between lines:
// a larger one (a reply of MiBs) goes once written, so that open
// connections do not each hold their largest reply.
const maxKeptLine = 64 << 10

func (w *lineWriter) flush() error {
	defer func() {
		if w.buf.Cap() > maxKeptLine {
			w.buf = bytes.Buffer{} // enc writes to &w.buf, which stays valid
		}
	}()
	_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.bw.Write(w.buf.Bytes()); err != nil {
		return &peerGoneError{err}
	}
	if err := w.bw.Flush(); err != nil {
		return &peerGoneError{err}
	}
	return nil
}

// peerGoneError is a failed write to the connection: the peer hung up or
// stopped reading, and nothing more can be said to it. A method that
// fails so (a stream to a client that went away) did nothing wrong.
type peerGoneError struct{ err error }

func (e *peerGoneError) Error() string { return e.err.Error() }
func (e *peerGoneError) Unwrap() error { return e.err }

func itoa(n int) string { return strconv.Itoa(n) }
