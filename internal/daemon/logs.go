package daemon

import (
	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/logreply"
	"github.com/gpusched/gpusched/pkg/api"
)

const defaultLogLines = 100

// logs returns the last lines of a process's log; with follow it streams
// them, then every new line, as log events until the process exits. What
// it reads of the log is bounded (see package logfile), whatever the
// process wrote.
func (d *Daemon) logs(c *call, stream *eventStream) (any, error) {
	var p api.LogsParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	rec, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	n := defaultLogLines
	if p.Lines != nil {
		n = *p.Lines
		if n < -1 {
			return nil, invalidf("logs %q: lines %d: want a count, or -1 for all", p.Name, n)
		}
	}
	if !p.Follow {
		return d.tailLogs(c, p.Name, rec.LogPath, n)
	}
	done := make(chan struct{})
	if rt := d.procs.get(rec.ID); rt != nil {
		done = rt.exited
	} else {
		close(done)
	}
	offset, err := d.followBacklog(c, stream, p.Name, rec.LogPath, n)
	if err != nil {
		return nil, err
	}
	sink := newFollowSink(c, d.bulk, stream, p.Name)
	err = logfile.Follow(c.ctx, d.logWatch, rec.LogPath, offset, done, sink)
	sink.end()
	if err != nil {
		return nil, err
	}
	return api.LogsResult{Name: p.Name, Lines: []string{}}, nil
}

// followBacklog sends a follow's first n lines as log events, and returns
// the offset at which Follow goes on. Reading the log and encoding each
// chunk of events (logreply.Events) is bulk work, as tailLogs's is: in one
// of the caller's turns and a slot of the bulk gate, charged to their
// share. Each chunk is written once both are given back, so that a client
// slow to read (a pager) holds neither: the user's other calls go on. An
// event a line, each encoded by reflection and written through, was 280
// ms of the daemon's CPU for 65,536 lines.
func (d *Daemon) followBacklog(c *call, stream *eventStream, name, path string, n int) (offset int64, err error) {
	_, leave, err := d.enterBulk(c)
	if err != nil {
		return 0, err
	}
	defer func() {
		if leave != nil {
			leave()
		}
	}()
	t, err := logfile.TailForFollow(c.ctx, path, n, d.cfg.LogKeep)
	if err != nil {
		return 0, err
	}
	err = logreply.Events(stream.prefix(), name, t, func(lines []byte) error {
		leave()
		leave = nil
		if err := stream.emitEncoded(lines); err != nil {
			return err
		}
		var err error
		_, leave, err = d.enterBulk(c)
		return err
	})
	return t.Offset(), err
}

// tailLogs answers logs without follow: a large call from a process in
// cgroups apart from the daemon's by a log reader there (readLogsApart);
// any other, reading the log and encoding the reply, the costly part, in
// one of the caller's turns (limits.Turns), as bulk work (bulkgate) that
// yields between chunks of lines.
func (d *Daemon) tailLogs(c *call, name, path string, n int) (any, error) {
	if d.logReader != nil && readsApart(n) {
		reply, ok, err := d.readLogsApart(c, logreader.Request{Name: name, Path: path, Lines: n, Keep: d.cfg.LogKeep})
		if err != nil || ok {
			return reply, err
		}
	}
	slot, leave, err := d.enterBulk(c)
	if err != nil {
		return nil, err
	}
	defer leave()
	t, err := logfile.Tail(c.ctx, path, n, d.cfg.LogKeep)
	if err != nil {
		return nil, err
	}
	return encodeLogs(c.ctx, slot, name, t)
}

// enterBulk starts bulk work for the caller: one of their turns
// (bulkTurn), then a slot of the bulk gate; leave gives both back.
func (d *Daemon) enterBulk(c *call) (slot *bulkgate.Slot, leave func(), err error) {
	release, err := d.bulkTurn(c)
	if err != nil {
		return nil, nil, err
	}
	slot, err = d.bulk.Enter(c.ctx, c.actor.UID)
	if err != nil {
		release()
		return nil, nil, err
	}
	return slot, func() {
		slot.Leave()
		release()
	}, nil
}

// bulkTurn takes one of the caller's turns for bulk work, once the caller
// is within their share of the daemon's CPU: a user over it waits without
// holding the turn that their quick calls need meanwhile. The share is
// looked at again with the turn held, after the turn's last holder was
// charged, so that the user's calls that waited together do not all run
// once it is paid off.
func (d *Daemon) bulkTurn(c *call) (release func(), err error) {
	for {
		if err := d.bulk.Await(c.ctx, c.actor.UID); err != nil {
			return nil, err
		}
		release, err := d.turns.Take(c.ctx, c.actor.UID)
		if err != nil || d.bulk.Within(c.actor.UID) {
			return release, err
		}
		release()
	}
}
