package simgpu

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/store"
)

// scanResult is one pass over procs/.
type scanResult struct {
	live map[int]record // trusted records of live processes, by pid
	// garbage and temps are, by uid, the names in that user's directory of
	// dead processes' and bad records, and of temporary files (orphaned if
	// seen under the user's lock).
	garbage, temps map[uint32][]string
	// untrusted says, for each record ignored because it is not the named
	// process's own, where it is and why (numbers only, so bounded).
	untrusted []string
}

func newScanResult() scanResult {
	return scanResult{live: map[int]record{}, garbage: map[uint32][]string{}, temps: map[uint32][]string{}}
}

// untidy returns the users whose directories hold garbage or temporary
// files.
func (s *scanResult) untidy() map[uint32]bool {
	out := map[uint32]bool{}
	for _, m := range []map[uint32][]string{s.garbage, s.temps} {
		for uid := range m {
			out[uid] = true
		}
	}
	return out
}

// used returns the live device usage on uuid. The sum saturates: records
// are their users' own files, and a forged 2^64-1 wrapped it round to
// little (the simulated allocator then handed out memory another user
// held).
func (s *scanResult) used(uuid string) uint64 {
	var sum uint64
	for _, rec := range s.live {
		u := rec.Usage[uuid]
		if sum+u < sum {
			return math.MaxUint64
		}
		sum += u
	}
	return sum
}

// scan reads every user's records and sorts them into live, garbage and
// untrusted. A record is trusted when its file, its directory and the
// process it names all belong to the same uid: whoever wrote it could
// have allocated that memory. Each file is replaced atomically, so a scan
// without the locks still sees whole records. What one user's directory
// holds (too many entries, unreadable files) is that user's records'
// problem only, never a failed scan.
func (r *Registry) scan() (scanResult, error) {
	procs := filepath.Join(r.dir, procsName)
	names, err := listDir(procs)
	if err != nil {
		return scanResult{}, fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	s := newScanResult()
	for _, name := range names {
		uid, err := strconv.ParseUint(name, 10, 32)
		if err != nil || strconv.FormatUint(uid, 10) != name {
			continue
		}
		r.scanUser(&s, uint32(uid))
	}
	return s, nil
}

// scanUser adds uid's directory to s.
func (r *Registry) scanUser(s *scanResult, uid uint32) {
	dir := r.userDir(uid)
	rel := filepath.Join(procsName, strconv.FormatUint(uint64(uid), 10))
	fi, err := os.Lstat(dir)
	if err != nil {
		return // removed since the listing
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || st.Uid != uid {
		s.untrusted = append(s.untrusted, fmt.Sprintf("%s: not a directory of uid %d", rel, uid))
		return
	}
	names, err := listDir(dir)
	if err != nil {
		s.untrusted = append(s.untrusted, fmt.Sprintf("%s: %s", rel, errText(err)))
		return
	}
	for _, name := range names {
		if store.IsTemp(name) {
			s.temps[uid] = append(s.temps[uid], name)
			continue
		}
		pid, ok := recordPID(name)
		if !ok {
			continue
		}
		rec, owner, err := readRecord(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Released since the listing.
		case err != nil && !errors.Is(err, errBadRecord):
			s.untrusted = append(s.untrusted, fmt.Sprintf("%s/%s: %s", rel, name, errText(err)))
		case err != nil || rec.PID != pid || !alive(rec.PID, rec.StartTime):
			s.garbage[uid] = append(s.garbage[uid], name)
		case owner != uid:
			s.untrusted = append(s.untrusted, fmt.Sprintf("%s/%s: owned by uid %d", rel, name, owner))
		default:
			// A process whose uid /proc hides (hidepid) counts, as in alive:
			// the daemon, which sees every process, decides what is trusted.
			if runs, err := ownerOf(pid); err == nil && runs != uid {
				s.untrusted = append(s.untrusted, fmt.Sprintf("%s/%s: names pid %d, which runs as uid %d", rel, name, pid, runs))
				continue
			}
			s.live[pid] = rec
		}
	}
}

// errText is a bounded description of a failed read: the errno's text,
// or a fixed phrase (path errors would repeat the path).
func errText(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, errTooMany):
		return fmt.Sprintf("over %d entries; its records are ignored", maxProcEntries)
	case errors.As(err, &errno):
		return "cannot be read: " + errno.Error()
	}
	return "cannot be read"
}

// errTooMany marks a directory of more than maxProcEntries entries.
var errTooMany = errors.New("too many entries")

// listDir returns the names in dir, reading it a batch at a time so that
// an overfull one costs no more than maxProcEntries names.
func listDir(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var names []string
	for {
		batch, err := d.Readdirnames(256)
		names = append(names, batch...)
		if len(names) > maxProcEntries {
			return nil, fmt.Errorf("%s holds over %d entries: %w", dir, maxProcEntries, errTooMany)
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

// removeGarbage removes what a scan under uid's lock found dead or orphaned
// in uid's directory. It is best effort: a file that cannot be removed
// stays ignored.
func (r *Registry) removeGarbage(uid uint32, s scanResult) {
	dir := r.userDir(uid)
	for _, names := range [][]string{s.garbage[uid], s.temps[uid]} {
		for _, name := range names {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}
