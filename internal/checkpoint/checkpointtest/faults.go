package checkpointtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FaultsFile is the name of the fault file, read from the directory of the
// fake's argv[0].
const FaultsFile = "faults.json"

// Fault is what the fake does wrong in one action ("lock", "checkpoint",
// "restore", "unlock", "get-state", "get-restore-tid", "help"), or, under
// "loader", in starting at all.
type Fault struct {
	DelayMS int    `json:"delay_ms,omitempty"` // sleep before acting
	Error   string `json:"error,omitempty"`    // then fail with this CUDA_ERROR_ name
	Times   int    `json:"times,omitempty"`    // only the first N matching calls (0: all)
	PIDs    []int  `json:"pids,omitempty"`     // only these target pids (empty: all)
	Leave   string `json:"leave,omitempty"`    // state to force when failing with Error
	// Gate, a path, holds the call before it acts: the fake creates
	// Gate+".waiting", then waits until Gate exists.
	Gate string `json:"gate,omitempty"`

	NoDeviceMap bool `json:"no_device_map,omitempty"` // help: driver 570's tool, no --device-map
	NoAction    bool `json:"no_action,omitempty"`     // help: driver 550's tool, no --action

	NeedsLibcuda bool `json:"needs_libcuda,omitempty"` // loader: libcuda.so.1 only on LD_LIBRARY_PATH
	CUDAVersion  int  `json:"cuda_version,omitempty"`  // loader: cuDriverGetVersion (0: new enough)
}

// Faults maps an action to its fault.
type Faults map[string]Fault

// Install puts a symlink named cuda-checkpoint to the built fake into dir,
// with faults beside it when faults is not nil, and returns the link's path.
func Install(dir, fake string, faults Faults) (string, error) {
	link := filepath.Join(dir, "cuda-checkpoint")
	if err := os.Symlink(fake, link); err != nil {
		return "", err
	}
	if faults != nil {
		if err := WriteFaults(dir, faults); err != nil {
			return "", err
		}
	}
	return link, nil
}

// WriteFaults replaces the fault file in dir and resets its call counts.
func WriteFaults(dir string, faults Faults) error {
	data, err := json.MarshalIndent(faults, "", "  ")
	if err != nil {
		return err
	}
	matches, err := filepath.Glob(filepath.Join(dir, "faults.count.*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil {
			return err
		}
	}
	// Renamed into place: a tool started meanwhile reads the old faults or
	// the new ones, never a truncated file (whose parse error it would
	// exit 2 on, which a caller reads as CUDA_ERROR_OUT_OF_MEMORY).
	tmp, err := os.CreateTemp(dir, FaultsFile+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, FaultsFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// ReadFaults reads the fault file in dir; a missing file means no faults.
func ReadFaults(dir string) (Faults, error) {
	data, err := os.ReadFile(filepath.Join(dir, FaultsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Faults{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f Faults
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, FaultsFile), err)
	}
	return f, nil
}

// Take reports whether the fault for action applies to a call on pid: the
// pid must match, and with Times the call must be among the first Times
// matching ones, counted in dir/faults.count.<action> under flock so that
// parallel calls count right.
func (f Fault) Take(dir, action string, pid int) (bool, error) {
	if len(f.PIDs) > 0 && !slices.Contains(f.PIDs, pid) {
		return false, nil
	}
	if f.Times <= 0 {
		return true, nil
	}
	file, err := os.OpenFile(filepath.Join(dir, "faults.count."+action), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, err
	}
	defer file.Close()
	if err := unix.Flock(int(file.Fd()), unix.LOCK_EX); err != nil {
		return false, err
	}
	data, err := io.ReadAll(file)
	if err != nil {
		return false, err
	}
	n := 0
	if s := strings.TrimSpace(string(data)); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			return false, fmt.Errorf("%s: %w", file.Name(), err)
		}
	}
	if n >= f.Times {
		return false, nil
	}
	if _, err := file.WriteAt([]byte(strconv.Itoa(n+1)+"\n"), 0); err != nil {
		return false, err
	}
	return true, nil
}
