package simgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
)

// File names inside a sim directory.
const (
	gpusName       = "gpus.json"
	procsName      = "procs"
	locksName      = "locks"
	hostProcName   = "hostproc"
	legacyLockName = "lock" // the one lock of every user before per-user locks
)

// EnvDir is the environment variable through which the daemon tells the
// processes it starts where the sim directory is.
const EnvDir = "GPUSCHED_SIM_DIR"

// Registry is an open sim directory. Its methods are safe for concurrent use
// by goroutines and processes: each user's changes are serialised by that
// user's lock file, which each call opens afresh, and a change that adds
// device memory checks the device again once written (see commitUsage).
type Registry struct {
	dir     string
	devices []Device       // sorted by index
	byUUID  map[string]int // uuid -> position in devices
	wait    time.Duration  // bound on waiting for a user's lock; 0: none
}

// Create makes (or re-initialises) the sim directory dir for devs: dir,
// procs/ and locks/ 0755 and root's, and gpus.json written atomically.
// Records of processes already in procs/<uid>/ are kept, so that jobs
// outlive a daemon restart; the shared lock file and records of earlier
// versions are removed. Create is the daemon's, which runs as root.
func Create(dir string, devs []Device) (*Registry, error) {
	devs, err := checkDevices(devs)
	if err != nil {
		return nil, fmt.Errorf("sim dir %s: %w", dir, err)
	}
	if err := setupDir(dir); err != nil {
		return nil, fmt.Errorf("sim dir %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(gpusFile{GPUs: devs}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := store.WriteFile(filepath.Join(dir, gpusName), append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("sim dir %s: %w", dir, err)
	}
	return newRegistry(dir, devs), nil
}

// HostProc is where a managed tree of the sim directory dir sees the
// host's /proc: the tree's own /proc is of its PID namespace, and a
// simulated job reports its host pid, as NVML would
// (procfs.UseHostProc). Outside a tree it is an empty directory.
func HostProc(dir string) string { return filepath.Join(dir, hostProcName) }

// setupDir creates dir, procs/, locks/ and hostproc/ with explicit modes, since the
// umask would otherwise narrow them, and removes what earlier versions
// left that anyone could write: the shared lock and procs/'s own files.
func setupDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{dir, filepath.Join(dir, procsName), filepath.Join(dir, locksName), HostProc(dir)} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Lchown(d, os.Geteuid(), os.Getegid()); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, legacyLockName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(dir, procsName))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			_ = os.Remove(filepath.Join(dir, procsName, e.Name()))
		}
	}
	return nil
}

// Open opens the sim directory dir made by Create.
func Open(dir string) (*Registry, error) {
	data, err := procfs.ReadFile(filepath.Join(dir, gpusName), maxStateSize)
	if err != nil {
		return nil, fmt.Errorf("sim dir %s: %w (is gpuschedd running with --sim?)", dir, err)
	}
	var f gpusFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("sim dir %s: %s: %w", dir, gpusName, err)
	}
	devs, err := checkDevices(f.GPUs)
	if err != nil {
		return nil, fmt.Errorf("sim dir %s: %s: %w", dir, gpusName, err)
	}
	return newRegistry(dir, devs), nil
}

func newRegistry(dir string, devs []Device) *Registry {
	r := &Registry{dir: dir, devices: devs, byUUID: make(map[string]int, len(devs))}
	for i, d := range devs {
		r.byUUID[d.UUID] = i
	}
	return r
}

// Dir returns the sim directory.
func (r *Registry) Dir() string { return r.dir }

// Devices returns the simulated devices, sorted by index.
func (r *Registry) Devices() []Device { return append([]Device(nil), r.devices...) }

// device returns the device with the given uuid.
func (r *Registry) device(uuid string) (Device, error) {
	i, ok := r.byUUID[uuid]
	if !ok {
		return Device{}, fmt.Errorf("simulated GPU %s: %w", uuid, ErrNoSuchDevice)
	}
	return r.devices[i], nil
}

// Visible resolves a CUDA_VISIBLE_DEVICES value: a comma-separated list of
// UUIDs or of indices into gpus.json. An empty value means no devices.
func (r *Registry) Visible(list string) ([]Device, error) {
	var out []Device
	seen := make(map[string]bool)
	for _, id := range strings.Split(list, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		d, err := r.lookup(id)
		if err != nil {
			return nil, err
		}
		if seen[d.UUID] {
			return nil, fmt.Errorf("simulated GPU %s listed twice", id)
		}
		seen[d.UUID] = true
		out = append(out, d)
	}
	return out, nil
}

// lookup finds a device by uuid or decimal index.
func (r *Registry) lookup(id string) (Device, error) {
	if n, err := strconv.Atoi(id); err == nil {
		for _, d := range r.devices {
			if d.Index == n {
				return d, nil
			}
		}
		return Device{}, fmt.Errorf("simulated GPU %d: %w", n, ErrNoSuchDevice)
	}
	return r.device(id)
}

// SetLockWait bounds how long calls wait for a user's lock: past d they
// fail with ErrLockHeld, naming the user (0, the default, waits as long as
// it takes). The daemon bounds its waits, so that a user who holds their
// own lock delays only the daemon's work on their own processes. Call it
// before the Registry is used.
func (r *Registry) SetLockWait(d time.Duration) { r.wait = d }

// BetweenCalls runs fn while no simulated process of uid is inside a
// simulated driver call (it holds the lock those calls take). A process
// stopped during fn stops outside any call, as a real one does: a real
// driver call runs in the kernel, and SIGSTOP takes effect only on the way
// back to user space. Stopped inside a call, a simulated process would keep
// its user's lock, and that user's calls would wait for good.
func (r *Registry) BetweenCalls(uid uint32, fn func()) error {
	return r.lockedUser(uid, func() error { fn(); return nil })
}
