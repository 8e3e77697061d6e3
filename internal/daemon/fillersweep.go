package daemon

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/memfill"
)

// sweepStrayFillers ends the filler helpers that no record names: a daemon
// killed between starting a helper and saving its record left one holding
// GPU memory until its orphan timeout. Every helper socket that no adopted
// filler uses is connected to, and the helper there released.
func (d *Daemon) sweepStrayFillers(ctx context.Context) {
	socks, err := filepath.Glob(filepath.Join(d.cfg.StateDir, "fillers", "*.sock"))
	if err != nil || len(socks) == 0 {
		return
	}
	owned := map[string]bool{}
	for _, f := range d.fillers.all() {
		if s := f.look(); s.helper != nil {
			owned[s.rec.Socket] = true
		}
	}
	uuids := map[int]string{}
	for _, dv := range d.gpuView().devices {
		uuids[dv.Index] = dv.UUID
	}
	for _, sock := range socks {
		index, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(sock), ".sock"))
		uuid, ok := uuids[index]
		if owned[sock] || err != nil || !ok {
			continue
		}
		opts := d.fillerOptions(uuid, index)
		opts.Socket = sock
		h, err := memfill.Adopt(ctx, opts)
		if err != nil {
			continue // nobody listens: a stale socket, replaced by the next helper
		}
		rctx, cancel := context.WithTimeout(ctx, fillerTimeout)
		err = h.Release(rctx)
		cancel()
		d.log.Warn("released a filler helper that no record names", zap.String("socket", sock), zap.Int("pid", h.PID()), zap.Error(err))
	}
}
