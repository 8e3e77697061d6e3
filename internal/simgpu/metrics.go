package simgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
)

// metricsName is the file of simulated measurements in a sim directory.
const metricsName = "metrics.json"

// Metrics are a simulated GPU's measurements besides memory, as NVML would
// report them. A nil field is unknown, like a metric NVML does not support.
type Metrics struct {
	UtilPercent     *int     `json:"util_percent,omitempty"`
	PowerWatts      *float64 `json:"power_watts,omitempty"`
	PowerLimitWatts *float64 `json:"power_limit_watts,omitempty"`
	TempC           *int     `json:"temp_c,omitempty"`
}

// zero reports whether m knows nothing.
func (m Metrics) zero() bool {
	return m.UtilPercent == nil && m.PowerWatts == nil && m.PowerLimitWatts == nil && m.TempC == nil
}

// check rejects values no GPU reports.
func (m Metrics) check() error {
	switch {
	case m.UtilPercent != nil && (*m.UtilPercent < 0 || *m.UtilPercent > 100):
		return fmt.Errorf("utilization %d%%: must be 0..100", *m.UtilPercent)
	case m.PowerWatts != nil && !(*m.PowerWatts >= 0 && !math.IsInf(*m.PowerWatts, 0)):
		return fmt.Errorf("power %v W: must be a number of watts, not negative", *m.PowerWatts)
	case m.PowerLimitWatts != nil && !(*m.PowerLimitWatts >= 0 && !math.IsInf(*m.PowerLimitWatts, 0)):
		return fmt.Errorf("power limit %v W: must be a number of watts, not negative", *m.PowerLimitWatts)
	}
	return nil
}

// metricsFile is the content of metrics.json: measurements by device uuid.
type metricsFile struct {
	GPUs map[string]Metrics `json:"gpus"`
}

// SetMetrics sets the measurements Snapshot reports for device uuid,
// replacing what was set before; zero Metrics clear them. metrics.json is
// replaced atomically under root's lock, so readers never see a
// partial file and concurrent setters do not lose each other's devices.
// The measurements outlive the daemon, as a real GPU's temperature would.
func (r *Registry) SetMetrics(uuid string, m Metrics) error {
	d, err := r.device(uuid)
	if err != nil {
		return err
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("simulated GPU %d (%s): %w", d.Index, uuid, err)
	}
	return r.lockedState(func() error {
		all, err := r.readMetrics()
		if err != nil {
			return err
		}
		if m.zero() {
			delete(all, uuid)
		} else {
			all[uuid] = m
		}
		data, err := json.MarshalIndent(metricsFile{GPUs: all}, "", "  ")
		if err != nil {
			return err
		}
		if err := store.Replace(filepath.Join(r.dir, metricsName), append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("sim dir %s: %w", r.dir, err)
		}
		return nil
	})
}

// readMetrics reads metrics.json; an absent file means no measurements.
func (r *Registry) readMetrics() (map[string]Metrics, error) {
	data, err := procfs.ReadFile(filepath.Join(r.dir, metricsName), maxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Metrics{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	var f metricsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("sim dir %s: %s: %w", r.dir, metricsName, err)
	}
	if f.GPUs == nil {
		f.GPUs = map[string]Metrics{}
	}
	return f.GPUs, nil
}
