package simgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

const (
	// maxRecordSize bounds what is read from a record file (one of a
	// process on 16 GPUs takes about 3 KiB).
	maxRecordSize = 16 << 10
	// maxStateSize bounds what is read from gpus.json, metrics.json and
	// faults.json.
	maxStateSize = 1 << 20
	// maxProcEntries bounds the entries a scan reads in procs/ and in each
	// user's directory there: a user may add files to their own, while a
	// live record needs a live process.
	maxProcEntries = 1 << 14
)

// record is the content of procs/<uid>/<pid>.json: one process's memory per device
// uuid. Parked memory was moved to host RAM by a checkpoint and does not
// count as device usage. CUDA is the checkpoint state; "" means running.
// Limit caps the process's own usage per device uuid, as an MPS client's
// pinned device memory limit does; a device without an entry is uncapped.
// NCCL names the NCCL group the process is a member of (SetNCCL); "" for
// none. RestoreTID is the host tid of the process's CUDA restore thread (0:
// none recorded) and RestoreNSTID its tid in the process's own PID
// namespace, which a CRIU restore keeps (see restorethread.go).
// RestoreBroken is set once a restore ran out of memory
// (NVIDIA/cuda-checkpoint#44). Util is how busy it keeps the devices it
// holds memory on, in percent (SetUtil).
type record struct {
	PID           int               `json:"pid"`
	StartTime     uint64            `json:"start_time"`
	Usage         map[string]uint64 `json:"usage"`
	Parked        map[string]uint64 `json:"parked"`
	CUDA          string            `json:"cuda,omitempty"`
	Limit         map[string]uint64 `json:"limit,omitempty"`
	NCCL          string            `json:"nccl,omitempty"`
	RestoreTID    int               `json:"restore_tid,omitempty"`
	RestoreNSTID  int               `json:"restore_ns_tid,omitempty"`
	RestoreBroken bool              `json:"restore_broken,omitempty"`
	Util          int               `json:"util,omitempty"`
}

func newRecord(pid int, startTime uint64) record {
	return record{PID: pid, StartTime: startTime, Usage: map[string]uint64{}, Parked: map[string]uint64{}}
}

// clone returns a copy of rec that shares no map with it.
func (rec record) clone() record {
	c := rec
	c.Usage, c.Parked, c.Limit = maps.Clone(rec.Usage), maps.Clone(rec.Parked), maps.Clone(rec.Limit)
	return c
}

// empty reports whether the record holds no memory, no limit, no NCCL
// group and no utilization at all and its process is running, so that the
// record can go.
func (rec *record) empty() bool {
	if rec.CUDA != "" || len(rec.Limit) > 0 || rec.NCCL != "" || rec.Util > 0 {
		return false
	}
	for _, n := range rec.Usage {
		if n > 0 {
			return false
		}
	}
	for _, n := range rec.Parked {
		if n > 0 {
			return false
		}
	}
	return true
}

func (r *Registry) recordPath(uid uint32, pid int) string {
	return filepath.Join(r.userDir(uid), strconv.Itoa(pid)+".json")
}

// recordPID returns the pid named by a record file name "<pid>.json".
func recordPID(name string) (int, bool) {
	s, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(s)
	return pid, err == nil && pid > 0 && strconv.Itoa(pid) == s
}

// errBadRecord marks a record file whose content is unusable: garbage to
// prune, unlike an I/O error.
var errBadRecord = errors.New("bad record")

// readRecord reads a record file and the uid that owns it. It refuses
// symlinks and anything but a regular file (a FIFO must not block the
// daemon).
func readRecord(path string) (record, uint32, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return record{}, 0, fmt.Errorf("%s: %w: symlink", path, errBadRecord)
	}
	if err != nil {
		return record{}, 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return record{}, 0, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return record{}, 0, fmt.Errorf("%s: %w: not a regular file", path, errBadRecord)
	case st.Nlink != 1:
		// Records are written whole and renamed into place: one of many
		// links is a user's copy, each costing a read a scan.
		return record{}, 0, fmt.Errorf("%s: %w: %d links", path, errBadRecord, st.Nlink)
	case st.Size > maxRecordSize:
		return record{}, 0, fmt.Errorf("%s: %w: larger than %d bytes", path, errBadRecord, maxRecordSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return record{}, 0, err
	}
	if len(data) > maxRecordSize {
		return record{}, 0, fmt.Errorf("%s: %w: larger than %d bytes", path, errBadRecord, maxRecordSize)
	}
	rec := record{}
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, 0, fmt.Errorf("%s: %w: %v", path, errBadRecord, err)
	}
	if rec.Usage == nil {
		rec.Usage = map[string]uint64{}
	}
	if rec.Parked == nil {
		rec.Parked = map[string]uint64{}
	}
	return rec, st.Uid, nil
}

// ownRecord reads the record of uid's process (pid, startTime), which must
// exist and be uid's.
func (r *Registry) ownRecord(uid uint32, pid int, startTime uint64) (record, error) {
	rec, owner, err := readRecord(r.recordPath(uid, pid))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && (!procfs.SameStart(rec.StartTime, startTime) || owner != uid)) {
		return record{}, fmt.Errorf("process %d: no simulated GPU memory: %w", pid, ErrNoSuchProcess)
	}
	return rec, err
}

// writeRecord stores rec in uid's directory, atomically, mode 0644 and
// owned by uid (root writes records of other users' processes too),
// dropping zero entries and a running state; or removes the file when the
// record holds no memory and its process is running. Records describe
// live processes only, so they are not fsynced.
func (r *Registry) writeRecord(uid uint32, rec record) error {
	if rec.CUDA == StateRunning {
		rec.CUDA = ""
	}
	for _, m := range []map[string]uint64{rec.Usage, rec.Parked} {
		for k, n := range m {
			if n == 0 {
				delete(m, k)
			}
		}
	}
	path := r.recordPath(uid, rec.PID)
	if rec.empty() {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("process %d: %w", rec.PID, err)
		}
		return nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := replaceAs(path, data, uid); err != nil {
		return fmt.Errorf("process %d: %w", rec.PID, err)
	}
	return nil
}

// replaceAs writes data to a temporary file beside path, owned by uid and
// mode 0644, and renames it over path.
func replaceAs(path string, data []byte, uid uint32) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if os.Geteuid() == 0 && uid != 0 {
		if err = f.Chown(int(uid), -1); err != nil {
			return err
		}
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
