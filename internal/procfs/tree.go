package procfs

import (
	"os"
	"sort"
	"strconv"
)

// Tree maps parent pids to their children, read from one scan of /proc.
type Tree struct {
	children map[int][]int
}

// ScanTree reads every process's parent. Processes that vanish during the
// scan are skipped.
func ScanTree() (*Tree, error) {
	d, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	t := &Tree{children: make(map[int][]int)}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := readStat(pid) // the parent is all a scan needs
		if err != nil {
			continue
		}
		t.children[s.PPID] = append(t.children[s.PPID], pid)
	}
	for _, c := range t.children {
		sort.Ints(c)
	}
	return t, nil
}

// Children returns pid's direct children, sorted.
func (t *Tree) Children(pid int) []int { return t.children[pid] }

// Descendants returns every process below root (not root itself), in
// breadth-first order.
func (t *Tree) Descendants(root int) []int {
	var out []int
	queue := append([]int(nil), t.children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, pid)
		queue = append(queue, t.children[pid]...)
	}
	return out
}
