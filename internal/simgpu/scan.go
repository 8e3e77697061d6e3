package simgpu

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
)

// scanResult is one pass over procs/.
type scanResult struct {
	live    map[int]record // records of live processes, by pid
	garbage []string       // files of dead processes, bad records
	temps   []string       // temporary files, orphaned if seen under the lock
}

// used returns the live device usage on uuid.
func (s *scanResult) used(uuid string) uint64 {
	var sum uint64
	for _, rec := range s.live {
		sum += rec.Usage[uuid]
	}
	return sum
}

// scan reads every record in procs/ and sorts them into live and garbage.
// Each file is replaced atomically, so a scan without the lock still sees
// whole records. A procs/ of more than maxProcEntries entries fails it.
func (r *Registry) scan() (scanResult, error) {
	procs := filepath.Join(r.dir, procsName)
	names, err := listProcs(procs)
	if err != nil {
		return scanResult{}, fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	s := scanResult{live: make(map[int]record)}
	for _, name := range names {
		if store.IsTemp(name) {
			s.temps = append(s.temps, name)
			continue
		}
		pid, ok := recordPID(name)
		if !ok {
			continue
		}
		rec, err := readRecord(filepath.Join(procs, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Released since the listing.
		case err != nil && !errors.Is(err, errBadRecord):
			return scanResult{}, fmt.Errorf("sim dir %s: %w", r.dir, err)
		case err != nil || rec.PID != pid || !alive(rec.PID, rec.StartTime):
			s.garbage = append(s.garbage, name)
		default:
			s.live[pid] = rec
		}
	}
	return s, nil
}

// listProcs returns the names in procs/, reading the directory a batch at
// a time so that an overfull one costs no more than maxProcEntries names.
func listProcs(procs string) ([]string, error) {
	d, err := os.Open(procs)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var names []string
	for {
		batch, err := d.Readdirnames(256)
		names = append(names, batch...)
		if len(names) > maxProcEntries {
			return nil, fmt.Errorf("%s holds over %d entries: remove the files that are not records of live processes", procs, maxProcEntries)
		}
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// alive reports whether process (pid, startTime) is running. When /proc
// cannot tell (for example hidepid), the process counts as alive, so that its
// memory stays counted.
func alive(pid int, startTime uint64) bool {
	st, err := readStat(pid)
	if errors.Is(err, ErrNoSuchProcess) {
		return false
	}
	return err != nil || (procfs.SameStart(st.StartTime, startTime) && !st.Exited())
}

// removeGarbage removes what a scan made under the lock found dead or
// orphaned. It is best effort: in the sticky procs/ another user's file may
// not be removable, and such a record stays ignored.
func (r *Registry) removeGarbage(s scanResult) {
	procs := filepath.Join(r.dir, procsName)
	for _, names := range [][]string{s.garbage, s.temps} {
		for _, name := range names {
			_ = os.Remove(filepath.Join(procs, name))
		}
	}
}
