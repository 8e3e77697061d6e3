package treefiles

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxMapsLine bounds one line of /proc/PID/maps: its fields and a path
// of at most PATH_MAX.
const maxMapsLine = 256 + unix.PathMax

// mapping is one file mapping of /proc/PID/maps, its key "map/START",
// START in hex as maps prints it.
type mapping struct {
	id   Identity
	path string
}

// eachMapping calls fn with each file mapping of process pid, as
// /proc/PID/maps lists it (address range, offset, device, inode, path);
// fn's error ends it.
func eachMapping(pid int, fn func(id Identity, path string) error) error {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), maxMapsLine)
	base := "/proc/" + strconv.Itoa(pid) + "/map_files/"
	for sc.Scan() {
		m, ok, err := parseMapping(sc.Text())
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// The mapped file itself, where /proc lets this process look
		// (CAP_SYS_ADMIN): whether it is deleted, which maps tells only
		// by a " (deleted)" that a file's own name may end with.
		m.id.nlink = 1
		if id, err := identify(m.id.Key, fmt.Sprintf("%s%x-%x", base, m.id.Start, m.id.End)); err == nil {
			m.id.Type, m.id.Dev, m.id.Ino, m.id.nlink = id.Type, id.Dev, id.Ino, id.nlink
		}
		if err := fn(m.id, m.path); err != nil {
			return err
		}
	}
	return sc.Err()
}

// parseMapping reads one line of /proc/PID/maps ("7f00-7f10 r--p 00000000
// fd:01 1234   /usr/lib/x.so"); ok is false for a mapping of no file
// (inode 0: anonymous memory, the stack, the vDSO).
func parseMapping(line string) (mapping, bool, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return mapping{}, false, fmt.Errorf("maps line %q", line)
	}
	ino, err := strconv.ParseUint(f[4], 10, 64)
	if err != nil {
		return mapping{}, false, fmt.Errorf("maps line %q: %w", line, err)
	}
	if ino == 0 {
		return mapping{}, false, nil
	}
	start, end, _ := strings.Cut(f[0], "-")
	from, err1 := strconv.ParseUint(start, 16, 64)
	to, err2 := strconv.ParseUint(end, 16, 64)
	if err1 != nil || err2 != nil {
		return mapping{}, false, fmt.Errorf("maps line %q: address range", line)
	}
	major, minor, ok := strings.Cut(f[3], ":")
	maj, err1 := strconv.ParseUint(major, 16, 32)
	min, err2 := strconv.ParseUint(minor, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return mapping{}, false, fmt.Errorf("maps line %q: device", line)
	}
	// The path is the rest of the line after the inode's field: it may
	// hold spaces.
	path := ""
	if i := strings.Index(line, " /"); i >= 0 {
		path = line[i+1:]
	}
	key := "map/" + start
	// A mapping's type is not in maps; every file mapping counts as a
	// regular file's (a device's mapping is compared by its device and
	// inode all the same).
	id := Identity{Key: key, Type: unix.S_IFREG, Dev: unix.Mkdev(uint32(maj), uint32(min)), Ino: ino, Start: from, End: to,
		writable: len(f[1]) == 4 && f[1][1] == 'w', shared: len(f[1]) == 4 && f[1][3] == 's'}
	return mapping{id: id, path: path}, true, nil
}
