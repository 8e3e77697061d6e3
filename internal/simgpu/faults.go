package simgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
)

// faultsName is the file of injected GPU failures in a sim directory.
const faultsName = "faults.json"

// ErrSampleFailed marks a Snapshot that failed because of an injected fault,
// as an NVML query fails when the driver or a GPU is lost.
var ErrSampleFailed = errors.New("simulated NVML failure")

// Faults are failures injected into Snapshot, to exercise what the daemon
// does when NVML fails. The zero value injects nothing.
type Faults struct {
	// SampleError, when set, makes every Snapshot fail with this message
	// (for example "GPU is lost"), as when NVML cannot count the devices.
	SampleError string `json:"sample_error,omitempty"`
	// Missing lists device UUIDs left out of Snapshot, with their
	// processes, as a GPU that fell off the bus drops out of NVML's list.
	Missing []string `json:"missing,omitempty"`
	// DeviceErrors maps device UUIDs to the error their queries fail with:
	// Snapshot lists the device with Err set and no usage or processes.
	DeviceErrors map[string]string `json:"device_errors,omitempty"`
}

func (f Faults) zero() bool {
	return f.SampleError == "" && len(f.Missing) == 0 && len(f.DeviceErrors) == 0
}

// SetFaults replaces the injected failures (zero Faults clear them).
// faults.json is replaced atomically under root's lock; like
// metrics.json it outlives the daemon, as a lost GPU stays lost.
func (r *Registry) SetFaults(f Faults) error {
	for _, uuid := range f.Missing {
		if _, err := r.device(uuid); err != nil {
			return err
		}
	}
	for uuid := range f.DeviceErrors {
		if _, err := r.device(uuid); err != nil {
			return err
		}
	}
	return r.lockedState(func() error {
		path := filepath.Join(r.dir, faultsName)
		if f.zero() {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("sim dir %s: %w", r.dir, err)
			}
			return nil
		}
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		if err := store.Replace(path, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("sim dir %s: %w", r.dir, err)
		}
		return nil
	})
}

// readFaults reads faults.json; an absent file injects nothing.
func (r *Registry) readFaults() (Faults, error) {
	data, err := procfs.ReadFile(filepath.Join(r.dir, faultsName), maxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return Faults{}, nil
	}
	if err != nil {
		return Faults{}, fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	var f Faults
	if err := json.Unmarshal(data, &f); err != nil {
		return Faults{}, fmt.Errorf("sim dir %s: %s: %w", r.dir, faultsName, err)
	}
	return f, nil
}
