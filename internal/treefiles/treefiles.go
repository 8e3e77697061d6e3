// Package treefiles records which files a process tree holds by path, by
// identity, so that a restore can be checked to give the tree the very
// files it had.
//
// CRIU dumps the files a tree holds by path (descriptors, file mappings,
// working and root directories, executables) and reopens those paths on
// restore as whoever runs it, checking no more than each file's size and
// mode (criu/files-reg.c, validate_file). The daemon restores as root. A
// tree's owner may, between a hibernate and its thaw (or during a fork's
// dump), point such a path at another file, a symlink from their own
// directory to /etc/shadow with a decoy of its size and mode first: root
// then opened /etc/shadow for their process. Take records, as a dump ends
// (CRIU's post-dump notification, the tree still seized), the identity of
// every file the tree holds by a path; Check compares, once CRIU has
// restored the tree and before it runs (CRIU's post-restore
// notification), every one with what the restored processes hold, and
// CheckAccess asks whether the owner may have each as it is held.
package treefiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxEntries bounds what Take records of one tree: descriptors and
// mappings of files by path, all processes together.
const MaxEntries = 1 << 18

// ErrMoved is Check's error for a file that is not the one the process
// held; ErrDenied CheckAccess's for one its owner may not have. Both say
// that a path the process had was pointed elsewhere (the same words).
var (
	ErrMoved  = errors.New("a path it had was pointed elsewhere")
	ErrDenied = errors.New("a path it had was pointed elsewhere")
)

// ErrDeletedDir is Take's error for a tree holding a deleted directory.
var ErrDeletedDir = errors.New("the tree holds a deleted directory, which a restore would make again at its path")

// ErrNamedPipe is Take's error for a tree holding a named pipe: CRIU
// reopens it by its path, as root, and writes what was queued in it there
// before anything can look.
var ErrNamedPipe = errors.New("the tree holds a named pipe, which a restore would reopen by its path and write into")

// ErrTooMany is Take's error for a tree holding more than MaxEntries.
var ErrTooMany = fmt.Errorf("the tree holds more than %d files and file mappings by path", MaxEntries)

// Table is what Take recorded: per process (by its pid in the tree's own
// PID namespace, which a restore keeps), each file it holds by path.
type Table struct {
	Boot  string             `json:"boot"` // the boot it was taken in
	Procs map[int][]Identity `json:"procs"`
}

// Identity is one file a process holds: where (Key: "fd/3", "map/7f00"
// (a mapping's start), "cwd", "root", "exe"), its type, and which file.
type Identity struct {
	Key  string `json:"k"`
	Type uint32 `json:"t"` // S_IFMT bits
	Dev  uint64 `json:"d"`
	Ino  uint64 `json:"i"`
	Rdev uint64 `json:"r,omitempty"` // a device file's device
	// Start and End are a mapping's addresses.
	Start uint64 `json:"s,omitempty"`
	End   uint64 `json:"e,omitempty"`
	path  string // where it was found, for errors
	// Path is a kernel file's path (kernelPath), by which it is known.
	Path string `json:"p,omitempty"`
	// shared and writable are a mapping's (MAP_SHARED, PROT_WRITE).
	shared, writable bool
	nlink            uint32 // its links: 0 once deleted
}

// isMapping reports whether the identity is a file mapping's.
func (id Identity) isMapping() bool { return strings.HasPrefix(id.Key, "map/") }

// Proc is one process of a tree: its host pid and its pid in the tree's
// namespace.
type Proc struct {
	PID, NSPID int
}

// placeLinks are the single links in /proc/PID through which a process
// holds a file by path, beside its descriptors (fd/) and mappings (maps).
var placeLinks = []string{"cwd", "root", "exe"}

// Take records the files procs hold by path, leaving out files deleted
// (CRIU restores those from the image) and those own says are the
// caller's own (in directories only root reaches, which no user can point
// elsewhere). A deleted directory held (a working directory removed) is
// ErrDeletedDir: CRIU would make it again at its path, as root. The
// kernel's files (under /proc and /sys) are known by their path, as the
// kernel resolves it. The processes must be stopped. It reads what /proc
// shows of each file without asking its file system (statx's
// AT_STATX_DONT_SYNC), so a stalled FUSE server of the owner's cannot hold
// it.
func Take(procs []Proc, boot string, own func(path string) bool) (Table, error) {
	t := Table{Boot: boot, Procs: map[int][]Identity{}}
	n := 0
	for _, p := range procs {
		var ids []Identity
		keep := func(id Identity, path string) error {
			switch {
			case !strings.HasPrefix(path, "/") || own(path):
				return nil // a socket, a pipe, an anonymous file; the caller's
			case id.nlink == 0 && id.Type == unix.S_IFDIR:
				return fmt.Errorf("%w: %s (%s)", ErrDeletedDir, strings.TrimSuffix(path, " (deleted)"), id.Key)
			case id.Type == unix.S_IFIFO:
				return fmt.Errorf("%w: %s (%s)", ErrNamedPipe, path, id.Key)
			case id.nlink == 0:
				return nil // deleted: CRIU restores it from the image
			case kernelPath(path):
				id.Path = path
			}
			id.path = path
			if n++; n > MaxEntries {
				return ErrTooMany
			}
			ids = append(ids, id)
			return nil
		}
		err := eachLink(p.PID, func(key, link string) error {
			path, err := os.Readlink(link)
			if err != nil {
				return nil // gone meanwhile
			}
			if watchLinks[path] {
				return keepWatches(p.PID, key, &ids, &n)
			}
			id, err := identify(key, link)
			if err != nil {
				return nil
			}
			return keep(id, path)
		})
		if err == nil {
			err = eachMapping(p.PID, keep)
		}
		if err != nil {
			return Table{}, fmt.Errorf("files of pid %d: %w", p.PID, err)
		}
		t.Procs[p.NSPID] = ids
	}
	return t, nil
}

// keepWatches adds to ids the watches of process pid's inotify or
// fanotify descriptor key (watchesOf).
func keepWatches(pid int, key string, ids *[]Identity, n *int) error {
	ws, err := watchesOf(key, "/proc/"+strconv.Itoa(pid)+"/fdinfo/"+strings.TrimPrefix(key, "fd/"))
	if err != nil {
		return nil // closed meanwhile
	}
	for _, w := range ws {
		if *n++; *n > MaxEntries {
			return ErrTooMany
		}
		w.path = "a watch of " + key
		*ids = append(*ids, w)
	}
	return nil
}

// kernelPath reports whether path is under /proc or /sys, whose inodes
// the kernel makes anew: such a file is known by its path, which the
// kernel resolved (no link of a user's is in it).
func kernelPath(path string) bool {
	return strings.HasPrefix(path, "/proc/") || strings.HasPrefix(path, "/sys/")
}

// Check reports the first file a restored process holds by path that is
// not the one Take recorded there: restored maps
// each process of the tree (by namespace pid) to its host pid. (What the
// restored processes hold that Take did not see is CRIU's own until they
// run: Take's tree was stopped, and CRIU imaged what it saw.) Across
// boots a file is known by its inode and type (device numbers may
// change), a device file by its device.
func Check(t Table, restored map[int]int, boot string, given []string) error {
	known := identities(given)
	for ns, ids := range t.Procs {
		if len(ids) == 0 {
			continue // held none (a zombie holds none, and is gone by now)
		}
		pid, ok := restored[ns]
		if !ok {
			return fmt.Errorf("restored tree lacks its process %d", ns)
		}
		// Nothing left out: a path that led to a file of the caller's
		// own, or of the kernel's, is another file all the same.
		held, err := Take([]Proc{{PID: pid, NSPID: ns}}, boot, func(string) bool { return false })
		if err != nil {
			return fmt.Errorf("restored process %d: %w", ns, err)
		}
		if err := compare(ids, held.Procs[ns], t.Boot == boot, known); err != nil {
			return fmt.Errorf("restored process %d %w", ns, err)
		}
	}
	return nil
}

// compare checks that what a process holds now is what it held: the same
// file at each descriptor and directory it had (a restored process holds
// CRIU's own descriptors too until it runs), and over each address range
// the same files mapped (a restore may map as one what the kernel kept as
// two mappings of one file, or the reverse). Both lists are in the order
// Take makes them, the mappings by address.
func compare(was, now []Identity, sameBoot bool, known map[[2]uint64]bool) error {
	links := map[string]Identity{}
	var wasMaps, nowMaps []Identity
	for _, id := range was {
		if id.isMapping() {
			wasMaps = append(wasMaps, id)
		} else {
			links[id.Key] = id
		}
	}
	for _, got := range now {
		if got.isMapping() {
			nowMaps = append(nowMaps, got)
			continue
		}
		w, ok := links[got.Key]
		if !ok {
			if known[[2]uint64{got.Dev, got.Ino}] || got.path == "/" || got.path == "/proc" || remade(got) {
				continue // CRIU's own until the tree runs: its images and log, the tree's root and proc
			}
			return fmt.Errorf("holds %s at %s, which it did not hold when it was dumped: %w", got.path, got.Key, ErrMoved)
		}
		if !same(w, got, sameBoot) {
			return fmt.Errorf("holds %s at %s, where it held another file when it was dumped: %w", got.path, got.Key, ErrMoved)
		}
		delete(links, got.Key)
	}
	for key := range links {
		return fmt.Errorf("lacks the file it held at %s when it was dumped: %w", key, ErrMoved)
	}
	return compareMaps(wasMaps, nowMaps, sameBoot, known)
}

// remade reports whether what a restored process holds is a file deleted
// when the tree was dumped, which CRIU made again from the image and
// unlinked: its dentry is unlinked, though CRIU may still hold a link of
// its own until the tree runs. (A file of root's whose own name ends so,
// reached by a path pointed elsewhere in the dump's last milliseconds, is
// the one way past, and no such file is known.)
func remade(id Identity) bool { return strings.HasSuffix(id.path, " (deleted)") }

// identities are the device and inode of each of paths that exists.
func identities(paths []string) map[[2]uint64]bool {
	known := map[[2]uint64]bool{}
	for _, p := range paths {
		if id, err := identify("", p); err == nil {
			known[[2]uint64{id.Dev, id.Ino}] = true
		}
	}
	return known
}

// compareMaps checks that each address mapped in was maps the same file
// in now, ranges sorted by address.
func compareMaps(was, now []Identity, sameBoot bool, known map[[2]uint64]bool) error {
	i := 0
	for _, got := range now {
		for i < len(was) && was[i].End <= got.Start {
			if !covered(was[i], now) {
				return fmt.Errorf("lacks the file it mapped at %s when it was dumped: %w", was[i].Key, ErrMoved)
			}
			i++
		}
		overlaps := false
		for j := i; j < len(was) && was[j].Start < got.End; j++ {
			if !same(was[j], got, sameBoot) {
				return fmt.Errorf("maps %s at %s, where it mapped another file when it was dumped: %w", got.path, got.Key, ErrMoved)
			}
			overlaps = true
		}
		// A file deleted when the tree was dumped, which CRIU made again
		// from the image, is deleted again by now and not in now.
		if !overlaps && !known[[2]uint64{got.Dev, got.Ino}] && !remade(got) {
			return fmt.Errorf("maps %s at %s, where it mapped no file when it was dumped: %w", got.path, got.Key, ErrMoved)
		}
	}
	for ; i < len(was); i++ {
		if !covered(was[i], now) {
			return fmt.Errorf("lacks the file it mapped at %s when it was dumped: %w", was[i].Key, ErrMoved)
		}
	}
	return nil
}

// covered reports whether some mapping of now overlaps m (compareMaps has
// checked that every overlap is of the same file).
func covered(m Identity, now []Identity) bool {
	k := sort.Search(len(now), func(k int) bool { return now[k].End > m.Start })
	return k < len(now) && now[k].Start < m.End
}

func same(want, got Identity, sameBoot bool) bool {
	switch {
	case want.Type != got.Type:
		return false
	case want.Path != "" || got.Path != "":
		return want.Path == got.Path
	case want.Type == unix.S_IFCHR || want.Type == unix.S_IFBLK:
		return want.Rdev == got.Rdev
	default:
		return want.Ino == got.Ino && (!sameBoot || want.Dev == got.Dev)
	}
}

// identify reads the identity of the file a /proc link leads to.
func identify(key, link string) (Identity, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, link, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_NLINK, &st); err != nil {
		return Identity{}, err
	}
	id := Identity{Key: key, Type: uint32(st.Mode) & unix.S_IFMT, Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino, nlink: st.Nlink}
	if id.Type == unix.S_IFCHR || id.Type == unix.S_IFBLK {
		id.Rdev = unix.Mkdev(st.Rdev_major, st.Rdev_minor)
	}
	return id, nil
}

// eachLink calls fn with the key and /proc path of every link through
// which process pid holds a file (its descriptors, its directories and
// executable), reading the descriptors a batch at a time; fn's error
// ends it.
func eachLink(pid int, fn func(key, link string) error) error {
	base := "/proc/" + strconv.Itoa(pid) + "/"
	d, err := os.Open(base + "fd")
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if err := fn("fd/"+name, base+"fd/"+name); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	for _, l := range placeLinks {
		if err := fn(l, base+l); err != nil {
			return err
		}
	}
	return nil
}
