package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"strconv"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/listing"
	"github.com/gpusched/gpusched/pkg/api"
)

// listPiece is how much of a listing's line is gathered before it goes on
// to the connection.
const listPiece = 32 << 10

// listReply is the result of a listing (ps, jobs, rm of several names or
// of every exited process, prune_jobs): an object of arrays whose records
// are encoded one at a time as the line is written, each with its command
// cut (cutCmd), so that a reply of any length costs the daemon one piece
// of it in memory. A listing longer than one piece encodes the rest as
// bulk work (bulkgate), a piece per slot, never holding one while it
// writes.
type listReply struct {
	ctx    context.Context
	gate   bulkGate
	uid    uint32
	fields []listField
}

// listField is one array of a listing, in order.
type listField struct {
	name  string
	items iter.Seq[any]
}

// listing is c's listing reply of fields.
func (d *Daemon) listing(c *call, fields ...listField) *listReply {
	return &listReply{ctx: c.ctx, gate: d.bulk, uid: c.actor.UID, fields: fields}
}

// encode writes the reply's JSON object to out with enc (which writes to
// out), calling send whenever out holds a piece.
func (l *listReply) encode(enc *json.Encoder, out *bytes.Buffer, send func() error) error {
	var slot *bulkgate.Slot
	defer func() {
		if slot != nil {
			slot.Leave()
		}
	}()
	out.WriteByte('{')
	for i, f := range l.fields {
		if i > 0 {
			out.WriteByte(',')
		}
		out.WriteString(strconv.Quote(f.name))
		out.WriteString(":[")
		first := true
		for item := range f.items {
			if out.Len() >= listPiece {
				if slot != nil {
					slot.Leave()
					slot = nil
				}
				if err := send(); err != nil {
					return err
				}
				s, err := l.gate.Enter(l.ctx, l.uid)
				if err != nil {
					return err
				}
				slot = s
			}
			if !first {
				out.WriteByte(',')
			}
			first = false
			if err := enc.Encode(item); err != nil {
				return err
			}
			out.Truncate(out.Len() - 1) // the newline
		}
		out.WriteByte(']')
	}
	out.WriteByte('}')
	return nil
}

// listedProcess is p as listings show it: its command cut.
func listedProcess(p api.Process) api.Process {
	cmd, cut := listing.Cut(p.Cmd, api.ListCmdBytes)
	p.Cmd, p.CmdTruncated = cmd, p.CmdTruncated || cut
	return p
}

// listedEvent is e as events carry it: its process's or job's command cut,
// as listings cut it. An event goes to every subscriber that may see it,
// encoded for each: one user's 60 subscriptions made each of their process
// starts of a 240 KiB command cost the daemon 185 ms more, held to no share.
func listedEvent(e api.Event) api.Event {
	if e.Process != nil {
		p := listedProcess(*e.Process)
		e.Process = &p
	}
	if e.Job != nil {
		j := listedJob(*e.Job)
		e.Job = &j
	}
	return e
}

// listedJob is j as listings show it: its command cut.
func listedJob(j api.Job) api.Job {
	cmd, cut := listing.Cut(j.Cmd, api.ListCmdBytes)
	j.Cmd, j.CmdTruncated = cmd, j.CmdTruncated || cut
	return j
}
