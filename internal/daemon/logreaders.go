package daemon

import (
	"context"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/logreply"
)

// logReader answers a large logs call in a process placed in the caller's
// CPU cgroups (logreader.Reader).
type logReader interface {
	Read(ctx context.Context, caller logreader.Cgroups, cpus string, req logreader.Request) ([]byte, error)
}

// readsApart reports whether a logs call for n lines (-1: all) is large
// enough to be worth a reader: more than one chunk of lines. A smaller one
// costs the daemon less than starting a process would.
func readsApart(n int) bool { return n < 0 || n > logreply.Chunk }

// readLogsApart answers a large logs call by a reader in the caller's
// cgroups and on its CPUs, in one of the caller's turns and charged to their share of the
// daemon's CPU for what starting it and relaying its reply cost. ok is
// false where the daemon is to answer itself: the caller is in the
// daemon's cgroups (known before the turn is taken), their process is gone
// or cannot be read, or the reader failed (a user may kill their own).
func (d *Daemon) readLogsApart(c *call, req logreader.Request) (reply encoded, ok bool, err error) {
	cg, err := peerCgroups(c.actor)
	if err != nil || logreader.Apart(cg) != nil {
		return nil, false, nil
	}
	release, err := d.bulkTurn(c)
	if err != nil {
		return nil, false, err
	}
	defer release()
	charge, err := d.bulk.Meter(c.ctx, c.actor.UID)
	if err != nil {
		return nil, false, err
	}
	defer charge()
	cpus, _ := readPeer(c.actor, cpuaffinity.Caller) // "": it keeps none, has none of the users', or is gone
	b, err := d.logReader.Read(c.ctx, cg, cpus, req)
	switch {
	case err == nil:
		return encoded(b), true, nil
	case c.ctx.Err() != nil:
		return nil, false, c.ctx.Err()
	}
	d.log.Debug("log reader failed; the daemon answers", zap.String("name", req.Name), zap.Error(err))
	return nil, false, nil
}

// peerCgroups is where a's process is (readPeer).
func peerCgroups(a actor) (logreader.Cgroups, error) { return readPeer(a, logreader.Of) }
