package daemon

import (
	"github.com/gpusched/gpusched/internal/logreply"
)

// followPieceBytes is how much of a follow's events are gathered before
// they are written, within one read of the log (logfile.Lines): a read of
// 64 KiB of empty lines is 65,536 events.
const followPieceBytes = 64 << 10

// followSink relays the lines a follow reads (logfile.Follow) as log
// events: encoded into one buffer and written through at each Flush, or
// once followPieceBytes are gathered. Each piece's encoding is charged to
// the caller's share of the daemon's CPU (bulkGate.Meter), which a caller
// over it waits for before the piece; the write is not, so that a client
// slow to read holds no thread. An event a line, encoded by reflection and
// written through, let one follower of `yes` keep half a CPU of the daemon
// busy, held to no share.
type followSink struct {
	c      *call
	bulk   bulkGate
	stream *eventStream
	head   []byte // logreply.EventHead
	buf    []byte
	charge func() // set while a piece is gathered
}

func newFollowSink(c *call, bulk bulkGate, stream *eventStream, name string) *followSink {
	return &followSink{c: c, bulk: bulk, stream: stream, head: logreply.EventHead(stream.prefix(), name)}
}

// Line adds line's event to the piece, starting one if none is gathered.
func (s *followSink) Line(line string) error {
	if s.charge == nil {
		charge, err := s.bulk.Meter(s.c.ctx, s.c.actor.UID)
		if err != nil {
			return err
		}
		s.charge = charge
	}
	s.buf = logreply.AppendEvent(s.buf, s.head, line, false)
	if len(s.buf) >= followPieceBytes {
		return s.Flush()
	}
	return nil
}

// Flush charges the piece gathered, if any, and writes it through.
func (s *followSink) Flush() error {
	if s.charge == nil {
		return nil
	}
	s.end()
	err := s.stream.emitEncoded(s.buf)
	if cap(s.buf) > 2*followPieceBytes {
		s.buf = nil // a piece with a line of escapes; not kept while idle
	} else {
		s.buf = s.buf[:0]
	}
	return err
}

// end charges what the piece gathered so far cost; Follow's caller calls it
// too, for a piece that Follow left unwritten.
func (s *followSink) end() {
	if s.charge != nil {
		s.charge()
		s.charge = nil
	}
}
