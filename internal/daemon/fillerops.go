package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/memfill"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// fillerTimeout bounds one exchange with a filler helper: starting it, or
// one change of what it holds.
const fillerTimeout = 10 * time.Second

// fillerLogDir holds the helpers' logs. It is a directory of its own
// because a process name cannot contain '/': no process's log (NAME.log,
// rotated NAME.log.N) can ever be a helper's.
func (d *Daemon) fillerLogDir() string { return filepath.Join(d.cfg.LogDir, "fillers") }

// fillerOptions are the helper options for a filler on uuid.
func (d *Daemon) fillerOptions(uuid string, index int) memfill.Options {
	o := memfill.Options{
		Path: d.helperPath, Backend: "cuda", UUID: uuid, ChunkMiB: d.cfg.FillerChunkMiB,
		Socket:  filepath.Join(d.cfg.StateDir, "fillers", strconv.Itoa(index)+".sock"),
		LogPath: filepath.Join(d.fillerLogDir(), "filler-"+strconv.Itoa(index)+".log"),
		Tick:    d.cfg.FillerTick, Orphan: d.cfg.FillerOrphan,
		Env:     []string{"CUDA_VISIBLE_DEVICES=" + uuid},
		OnState: func(memfill.State) { d.sched.kick() },
	}
	if d.simDir != "" {
		o.Backend, o.SimDir = "sim", d.simDir
	}
	return o
}

// spawnFiller starts f's helper and brings it to f's target. The caller
// holds f.mu.
func (d *Daemon) spawnFiller(ctx context.Context, f *filler) error {
	index, ok := d.gpuView().index[f.rec.UUID]
	if !ok {
		return api.Errorf(api.CodeUnavailable, "GPU %s is not present", f.rec.UUID)
	}
	stopStrayFiller(f.rec)
	opts := d.fillerOptions(f.rec.UUID, index)
	f.rec.Socket = opts.Socket
	// A GPU's helpers append to one log, every user's fills in turn:
	// held to a process log's cap, or a loop of fill and unfill grows it
	// for ever (16 KB a second).
	if _, err := logfile.Enforce(opts.LogPath, d.cfg.LogMaxBytes, d.cfg.LogKeep); err != nil {
		d.log.Warn("rotate a filler's log", zap.String("log", opts.LogPath), zap.Error(err))
	}
	h, err := memfill.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("start the filler on GPU %d: %w", index, err)
	}
	f.helper, f.rec.PID, f.rec.Start = h, h.PID(), h.StartTime()
	f.sent = [2]uint64{}
	return d.applyFiller(ctx, f)
}

// adoptFiller reconnects to the helper a previous daemon left holding
// memory; the caller holds f.mu.
func (d *Daemon) adoptFiller(ctx context.Context, f *filler) error {
	if f.rec.PID <= 0 || !procfs.Alive(f.rec.PID, f.rec.Start) {
		return fmt.Errorf("filler helper %d is gone", f.rec.PID)
	}
	index := d.gpuView().index[f.rec.UUID]
	opts := d.fillerOptions(f.rec.UUID, index)
	opts.Socket = f.rec.Socket
	h, err := memfill.Adopt(ctx, opts)
	if err != nil {
		return err
	}
	if h.PID() != f.rec.PID {
		_ = h.Detach()
		return fmt.Errorf("filler socket %s answers as pid %d, not %d", f.rec.Socket, h.PID(), f.rec.PID)
	}
	f.helper, f.sent = h, [2]uint64{}
	return d.applyFiller(ctx, f)
}

// applyFiller sends f's target, in the helper's terms, and current reserve
// to its helper unless it has them already, and waits until the helper has
// applied them. The caller holds f.mu.
func (d *Daemon) applyFiller(ctx context.Context, f *filler) error {
	if f.helper == nil {
		return nil
	}
	d.capFiller(f)
	dev, _ := d.gpuView().device(f.rec.UUID)
	target := memfill.HelperTarget(f.rec.TargetMiB, dev.TotalMiB, f.helper.State().TotalMiB)
	want := [2]uint64{target, d.fillerReserve(f)}
	if want == f.sent {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, fillerTimeout)
	defer cancel()
	if _, err := f.helper.Set(ctx, want[0], want[1]); err != nil {
		f.err = err.Error()
		return err
	}
	f.sent, f.err = want, ""
	return nil
}

// releaseFiller frees f's memory, ends its helper and forgets it.
func (d *Daemon) releaseFiller(ctx context.Context, f *filler, why string) error {
	out := d.fillerToAPI(f, d.gpuView())
	out.HeldMiB = 0
	f.mu.Lock()
	d.fillers.remove(f)
	f.released = true
	var err error
	if f.helper != nil {
		// Even when the daemon is shutting down: a helper left releasing
		// with no record would hold its memory until its orphan timeout.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fillerTimeout)
		err = f.helper.Release(rctx)
		cancel()
		f.helper = nil
	} else {
		stopStrayFiller(f.rec)
	}
	if derr := d.fillers.store.Delete(f.rec.UUID); derr != nil && err == nil {
		err = derr
	}
	f.unlock()
	d.events.publish(api.Event{Type: api.EventFiller, Time: time.Now(), Name: f.rec.UUID, Filler: &out})
	d.log.Info("filler released", zap.String("gpu", f.rec.UUID), zap.String("why", why), zap.Error(err))
	d.sched.kick()
	return err
}

// runFillers keeps every filler up to date until ctx ends: reserves follow
// their owners' processes, a filler whose process exited is released, and
// a helper that died is started again to the same target. On the way out
// the helpers are left holding, for the next daemon to adopt.
func (d *Daemon) runFillers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for _, f := range d.fillers.all() {
				f.mu.Lock()
				if f.helper != nil {
					_ = f.helper.Detach()
					f.helper = nil
				}
				f.unlock()
			}
			return
		case <-d.fillers.kicks:
		}
		for _, f := range d.fillers.all() {
			d.tendFiller(ctx, f)
		}
	}
}

// tendFiller brings one filler up to date.
func (d *Daemon) tendFiller(ctx context.Context, f *filler) {
	if why := d.fillerObsolete(f); why != "" {
		if err := d.releaseFiller(ctx, f, why); err != nil {
			d.log.Warn("release filler", zap.String("gpu", f.rec.UUID), zap.Error(err))
		}
		return
	}
	f.mu.Lock()
	defer f.unlock()
	if f.released {
		return // released since the loop listed it: no helper to restart
	}
	if f.helper != nil {
		select {
		case <-f.helper.Done():
			d.log.Warn("filler helper died; starting it again", zap.String("gpu", f.rec.UUID), zap.Int("pid", f.helper.PID()))
			f.helper = nil
		default:
		}
	}
	var err error
	if f.helper == nil {
		err = d.spawnFiller(ctx, f)
		if err == nil {
			err = d.fillers.store.Put(f.rec.UUID, f.rec)
		}
	} else {
		err = d.applyFiller(ctx, f)
	}
	if err != nil && ctx.Err() == nil {
		f.err = err.Error()
		d.log.Warn("filler", zap.String("gpu", f.rec.UUID), zap.Error(err))
	}
}

// fillerObsolete says why f should go: its attached process exited.
func (d *Daemon) fillerObsolete(f *filler) string {
	if f.rec.Process == "" {
		return ""
	}
	for _, r := range d.table.View().Records {
		if r.ID == f.rec.Process {
			if r.Live() {
				return ""
			}
			return fmt.Sprintf("process %q exited", r.Name)
		}
	}
	return "its process is gone"
}

// openFillers loads the fillers a previous daemon left and re-adopts their
// helpers, or starts new ones to the same targets. A session filler's
// connection is gone: it is released.
func (d *Daemon) openFillers(ctx context.Context) error {
	keys, err := d.fillers.store.Keys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		var rec fillerRecord
		if err := d.fillers.store.Get(k, &rec); err != nil {
			d.quarantineFiller(k, err)
			continue
		}
		f := newFiller(rec)
		f.mu.Lock()
		err := d.adoptFiller(ctx, f)
		f.unlock()
		if err != nil {
			d.log.Info("filler not re-adopted; starting a new helper", zap.String("gpu", rec.UUID), zap.Error(err))
		} else {
			d.log.Info("filler re-adopted", zap.String("gpu", rec.UUID), zap.Int("pid", rec.PID))
		}
		d.fillers.add(f)
		if rec.Session {
			if err := d.releaseFiller(ctx, f, "its session ended with the previous daemon"); err != nil {
				d.log.Warn("release filler", zap.String("gpu", rec.UUID), zap.Error(err))
			}
		}
	}
	d.sweepStrayFillers(ctx)
	d.fillers.kick()
	return nil
}

// quarantineFiller moves a bad filler record aside.
func (d *Daemon) quarantineFiller(key string, cause error) {
	dst, err := d.fillers.store.Quarantine(key)
	d.log.Warn("quarantined a bad filler record", zap.String("key", key), zap.String("moved_to", dst),
		zap.NamedError("cause", cause), zap.Error(err))
}

// stopStrayFiller ends a helper of rec that could not be re-adopted: on
// SIGTERM it frees its memory and exits.
func stopStrayFiller(rec fillerRecord) {
	if rec.PID > 0 && procfs.Alive(rec.PID, rec.Start) {
		_ = unix.Kill(rec.PID, unix.SIGTERM)
	}
}
