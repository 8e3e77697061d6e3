package procfs

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// TreeOf lists root and every process below it, parents before children,
// from the kernel's per-thread children lists: it reads only the tree's own
// files, where ScanTree reads every process of the machine. The lists are
// exact for stopped processes; a child forked meanwhile by a running one
// may be missed. Without those lists (a kernel built without
// CONFIG_PROC_CHILDREN), or when one is longer than MaxPIDList, it scans
// /proc instead. A root that is gone gives an empty list.
func TreeOf(root int) ([]int, error) {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		kids, err := childrenOf(out[i])
		if errors.Is(err, errNoChildrenFile) || errors.Is(err, ErrTruncated) {
			t, err := ScanTree()
			if err != nil {
				return nil, err
			}
			return append([]int{root}, t.Descendants(root)...), nil
		}
		if err != nil {
			if i == 0 {
				return nil, nil
			}
			continue // exited meanwhile
		}
		out = append(out, kids...)
	}
	return out, nil
}

var errNoChildrenFile = errors.New("no /proc/<pid>/task/<tid>/children")

// childrenOf reads the children of every thread of pid. A list longer than
// MaxPIDList gives ErrTruncated.
func childrenOf(pid int) ([]int, error) {
	dir := Path(pid, "/task")
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, tid := range tids {
		b, err := ReadFile(dir+"/"+tid.Name()+"/children", MaxPIDList)
		if errors.Is(err, ErrTruncated) {
			return nil, err
		}
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir + "/" + tid.Name()); serr == nil {
				return nil, errNoChildrenFile
			}
			continue // the thread ended
		}
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
