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

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
	"golang.org/x/sys/unix"
)

// File names inside a sim directory.
const (
	gpusName  = "gpus.json"
	procsName = "procs"
	lockName  = "lock"
)

// EnvDir is the environment variable through which the daemon tells the
// processes it starts where the sim directory is.
const EnvDir = "GPUSCHED_SIM_DIR"

// Registry is an open sim directory. Its methods are safe for concurrent use
// by goroutines and processes: changes are serialised by the directory's lock
// file, which each call opens afresh.
type Registry struct {
	dir     string
	devices []Device       // sorted by index
	byUUID  map[string]int // uuid -> position in devices
}

// Create makes (or re-initialises) the sim directory dir for devs: dir 0755,
// procs/ 01777, lock 0666, and gpus.json written atomically. Records of
// processes already in procs/ are kept, so that jobs outlive a daemon restart.
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

// setupDir creates dir, procs/ and the lock file with explicit modes, since
// the umask would otherwise narrow them.
func setupDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	procs := filepath.Join(dir, procsName)
	if err := os.Mkdir(procs, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(procs, 0o777|fs.ModeSticky); err != nil {
		return err
	}
	lock := filepath.Join(dir, lockName)
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(lock, 0o666)
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

// BetweenCalls runs fn while no simulated process is inside a simulated
// driver call (it holds the directory lock those calls take). A process
// stopped during fn stops outside any call, as a real one does: a real
// driver call runs in the kernel, and SIGSTOP takes effect only on the way
// back to user space. Stopped inside a call, a simulated process would
// keep the lock, and every user of the sim directory would wait for good.
func (r *Registry) BetweenCalls(fn func()) error {
	return r.locked(func() error { fn(); return nil })
}

// locked runs fn holding the directory lock, waiting for it if needed.
func (r *Registry) locked(fn func() error) error {
	fd, err := r.lock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn()
}

// tryLocked runs fn if the directory lock is free, and reports whether it did.
func (r *Registry) tryLocked(fn func()) bool {
	fd, err := r.lock(unix.LOCK_EX | unix.LOCK_NB)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	fn()
	return true
}

// lock opens the lock file and flocks it; closing the fd releases the lock.
// A fresh open file description per call makes goroutines exclude each other
// as well as processes.
func (r *Registry) lock(how int) (int, error) {
	path := filepath.Join(r.dir, lockName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("sim dir %s: lock: %w", r.dir, err)
	}
	for {
		err = unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sim dir %s: lock: %w", r.dir, err)
	}
	return fd, nil
}
