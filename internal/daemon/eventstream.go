package daemon

import (
	"encoding/json"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// eventStream is where a streaming call's events go: lines of the
// connection's writer, {"id":..,"event":..}, each written through.
type eventStream struct {
	w  *lineWriter
	id json.RawMessage
}

// emit writes one event.
func (s *eventStream) emit(e *api.Event) error {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begin(s.id)
	w.buf.WriteString(`"event":`)
	if err := w.enc.Encode(e); err != nil {
		return err
	}
	w.trimNewline()
	w.buf.WriteString("}\n")
	return w.flush()
}

// prefix is how each of the stream's event lines begins, up to and with
// `"event":`.
func (s *eventStream) prefix() []byte {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begin(s.id)
	w.buf.WriteString(`"event":`)
	p := append([]byte(nil), w.buf.Bytes()...)
	w.buf.Reset()
	return p
}

// emitEncoded writes event lines encoded already (each begun with prefix
// and ended with "}\n", as logreply.Events encodes a log's), passed on to
// the connection as they are and written through once.
func (s *eventStream) emitEncoded(lines []byte) error {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.bw.Write(lines); err != nil {
		return &peerGoneError{err}
	}
	if err := w.bw.Flush(); err != nil {
		return &peerGoneError{err}
	}
	return nil
}
