package lazypages

import (
	"slices"
	"sort"
)

// run is a range of a task's pages still to fill: at [start, end) in the
// process now, image address img at start. Runs are kept in image-address
// order; a remap moves start and end but never img (as lazy_iov's start
// and img_start in criu/uffd.c).
type run struct{ start, end, img uint64 }

func (r run) imgEnd() uint64 { return r.img + r.end - r.start }

// runSet is a task's pages still out.
type runSet []run

// pages counts them.
func (rs runSet) pages() uint64 {
	var n uint64
	for _, r := range rs {
		n += (r.end - r.start) / pageSize
	}
	return n
}

// at returns the run holding the page at addr in the process.
func (rs runSet) at(addr uint64) (run, bool) {
	for _, r := range rs {
		if addr >= r.start && addr < r.end {
			return r, true
		}
	}
	return run{}, false
}

// cutImage removes the image range [lo, hi).
func (rs runSet) cutImage(lo, hi uint64) runSet {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].imgEnd() > lo })
	for i < len(rs) && rs[i].img < hi {
		r := rs[i]
		a, b := max(lo, r.img), min(hi, r.imgEnd())
		head := run{start: r.start, end: r.start + (a - r.img), img: r.img}
		tail := run{start: r.start + (b - r.img), end: r.end, img: b}
		switch {
		case head.start < head.end && tail.start < tail.end:
			rs[i] = head
			rs = slices.Insert(rs, i+1, tail)
			return rs
		case head.start < head.end:
			rs[i] = head
			i++
		case tail.start < tail.end:
			rs[i] = tail
			return rs
		default:
			rs = slices.Delete(rs, i, i+1)
		}
	}
	return rs
}

// cutAddr removes what lies at [lo, hi) in the process.
func (rs runSet) cutAddr(lo, hi uint64) runSet {
	out := rs[:0:0]
	for _, r := range rs {
		out = append(out, r.outside(lo, hi)...)
	}
	return out
}

// outside returns the parts of r outside [lo, hi) in the process.
func (r run) outside(lo, hi uint64) []run {
	if hi <= r.start || lo >= r.end {
		return []run{r}
	}
	var out []run
	if lo > r.start {
		out = append(out, run{start: r.start, end: lo, img: r.img})
	}
	if hi < r.end {
		out = append(out, run{start: hi, end: r.end, img: r.img + (hi - r.start)})
	}
	return out
}

// remap moves what lies at [from, from+n) in the process to to (mremap;
// handle_remap in criu/uffd.c).
func (rs runSet) remap(from, to, n uint64) runSet {
	out := rs[:0:0]
	for _, r := range rs {
		a, b := max(from, r.start), min(from+n, r.end)
		if a >= b {
			out = append(out, r)
			continue
		}
		out = append(out, r.outside(from, from+n)...)
		out = append(out, run{start: a - from + to, end: b - from + to, img: r.img + (a - r.start)})
	}
	slices.SortFunc(out, func(x, y run) int {
		switch {
		case x.img < y.img:
			return -1
		case x.img > y.img:
			return 1
		}
		return 0
	})
	return out
}
