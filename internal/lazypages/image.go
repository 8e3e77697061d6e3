package lazypages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/criuimg"
)

// CRIU's image format (criu/image.c, criu/protobuf.c, criu/include/magic.h):
// two u32 magics, IMG_COMMON and the image's own, then protobuf messages,
// each after its u32 size. A pagemap image (images/pagemap.proto) is one
// pagemap_head{pages_id} and then pagemap_entry{vaddr, nr_pages, flags} in
// address order; the present pages of its entries are, in that order,
// the raw pages image pages-<pages_id>.img. An mm image (images/mm.proto)
// is one mm_entry, whose vmas are the task's mappings in address order.
const (
	// Pagemap entry flags (criu/include/pagemap.h).
	peParent  = 1 << 0 // the pages are in the parent image
	peLazy    = 1 << 1 // the restore leaves them to the lazy-pages side
	pePresent = 1 << 2 // the pages are in this image's pages image

	pageSize = 4096

	pstreeMagic = 0x50273030 // PSTREE_MAGIC

	// Bounds on what is read of an image: the images hold what a user's
	// process and CRIU, run as that user, sent to the page server.
	maxPagemapBytes = 256 << 20 // over 10M entries
	maxMMBytes      = 64 << 20  // over 1M mappings
	maxPstreeBytes  = 16 << 20  // maxTasks processes of many threads
	maxParents      = 64        // parent links followed
)

var errImage = errors.New("bad image")

// readImage reads the protobuf messages of the image at path, checking its
// magic, bounded by limit bytes in all.
func readImage(path string, magic uint32, limit int64) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, errImage, limit)
	}
	le := binary.LittleEndian
	if len(b) < 8 || le.Uint32(b) != criuimg.CommonMagic || le.Uint32(b[4:]) != magic {
		return nil, fmt.Errorf("%s: %w: not an image of magic %#x", path, errImage, magic)
	}
	var msgs [][]byte
	for b = b[8:]; len(b) > 0; {
		if len(b) < 4 {
			return nil, fmt.Errorf("%s: %w: truncated message size", path, errImage)
		}
		n := le.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, fmt.Errorf("%s: %w: message of %d bytes past the end", path, errImage, n)
		}
		msgs = append(msgs, b[4:4+n])
		b = b[4+n:]
	}
	return msgs, nil
}

// entry is one pagemap entry; off is where its pages start in the pages
// image when it is present.
type entry struct {
	vaddr, n uint64 // n pages
	flags    uint32
	off      int64
}

func (e entry) end() uint64 { return e.vaddr + e.n*pageSize }

// pagemapImage is a task's pagemap in one images directory.
type pagemapImage struct {
	dir     string
	entries []entry
	pages   *pagesFile
}

// readPagemap reads and checks pagemap-<id>.img in dir and opens its pages
// image, which must hold every present page.
func readPagemap(dir string, id int) (*pagemapImage, error) {
	path := filepath.Join(dir, fmt.Sprintf("pagemap-%d.img", id))
	msgs, err := readImage(path, criuimg.PagemapMagic, maxPagemapBytes)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: %w: no pagemap head", path, errImage)
	}
	var head pagemap.PagemapHead
	if err := proto.Unmarshal(msgs[0], &head); err != nil {
		return nil, fmt.Errorf("%s: %w: head: %v", path, errImage, err)
	}
	m := &pagemapImage{dir: dir, entries: make([]entry, 0, len(msgs)-1)}
	var off int64
	for i, b := range msgs[1:] {
		var pe pagemap.PagemapEntry
		if err := proto.Unmarshal(b, &pe); err != nil {
			return nil, fmt.Errorf("%s: %w: entry %d: %v", path, errImage, i, err)
		}
		e := entry{vaddr: pe.GetVaddr(), n: uint64(pe.GetNrPages()), flags: pe.GetFlags(), off: -1}
		switch {
		case e.n == 0 || e.vaddr%pageSize != 0 || e.vaddr > math.MaxUint64-e.n*pageSize:
			return nil, fmt.Errorf("%s: %w: entry %d: %d pages at %#x", path, errImage, i, e.n, e.vaddr)
		case len(m.entries) > 0 && e.vaddr < m.entries[len(m.entries)-1].end():
			return nil, fmt.Errorf("%s: %w: entry %d at %#x overlaps or precedes the one before", path, errImage, i, e.vaddr)
		case e.flags&^(peParent|peLazy|pePresent) != 0 || e.flags&pePresent != 0 && e.flags&peParent != 0:
			return nil, fmt.Errorf("%s: %w: entry %d: flags %#x", path, errImage, i, e.flags)
		}
		if e.flags&pePresent != 0 {
			e.off = off
			off += int64(e.n * pageSize)
		}
		m.entries = append(m.entries, e)
	}
	pages := filepath.Join(dir, fmt.Sprintf("pages-%d.img", head.GetPagesId()))
	if m.pages, err = openPages(pages); err != nil {
		return nil, err
	}
	if m.pages.size < off {
		m.pages.f.Close()
		return nil, fmt.Errorf("%s: %w: truncated: %d bytes, its pagemap has %d", pages, errImage, m.pages.size, off)
	}
	return m, nil
}

// find returns the index of the entry holding vaddr, or -1.
func (m *pagemapImage) find(vaddr uint64) int {
	i := sort.Search(len(m.entries), func(i int) bool { return m.entries[i].end() > vaddr })
	if i < len(m.entries) && m.entries[i].vaddr <= vaddr {
		return i
	}
	return -1
}

// pagesFile is a pages image, read with O_DIRECT where the file system
// allows it: the pages go from the disk into the server's buffer, not
// through the page cache.
type pagesFile struct {
	f    *os.File
	size int64
}

func openPages(path string) (*pagesFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) { // no O_DIRECT here (tmpfs)
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pagesFile{f: f, size: fi.Size()}, nil
}

// readAt fills b (page-aligned, a whole number of pages) from off.
func (p *pagesFile) readAt(b []byte, off int64) error {
	if off+int64(len(b)) > p.size {
		return fmt.Errorf("%s: %w: read of %d bytes at %d past its end (%d)", p.f.Name(), errImage, len(b), off, p.size)
	}
	_, err := p.f.ReadAt(b, off)
	return err
}

// segment is a run of lazy pages whose data lie together in one pages
// image: n pages at image address vaddr, from off in src.
type segment struct {
	vaddr, n uint64
	src      *pagesFile
	off      int64
}

func (s segment) end() uint64 { return s.vaddr + s.n*pageSize }

// taskImage is what the server serves one task from: its lazy pages'
// data (segments, in address order) and the runs to fill, split at its
// mappings' bounds (a UFFDIO_COPY stays within one mapping: collect_iovs
// in criu/uffd.c).
type taskImage struct {
	id    int
	segs  []segment
	runs  []run
	files []*pagesFile
}

// loadTask reads the images of the task with image id id in dir: the
// lazy entries of its pagemap (flags PE_LAZY, as restore_priv_vma_content
// in criu/mem.c leaves them to the lazy-pages side), their data looked up
// through the parent chain when in the parent (criu/pagemap.c, read
// through the "parent" link), and its mappings.
func loadTask(dir string, id int) (*taskImage, error) {
	m, err := readPagemap(dir, id)
	if err != nil {
		return nil, err
	}
	t := &taskImage{id: id, files: []*pagesFile{m.pages}}
	chain := []*pagemapImage{m}
	for _, e := range m.entries {
		if e.flags&peLazy == 0 {
			continue
		}
		if t.segs, err = t.resolve(chain, 0, e.vaddr, e.n, t.segs); err != nil {
			t.close()
			return nil, err
		}
	}
	vmas, err := readVMAs(dir, id)
	if err == nil {
		t.runs, err = splitRuns(t.segs, vmas)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// resolve appends the segments of n pages at vaddr as level depth of chain
// holds them, opening parents as needed.
func (t *taskImage) resolve(chain []*pagemapImage, depth int, vaddr, n uint64, segs []segment) ([]segment, error) {
	m := chain[depth]
	for n > 0 {
		i := m.find(vaddr)
		if i < 0 {
			return nil, fmt.Errorf("%s: %w: lazy page %#x not in image %d's pagemap", t.name(), errImage, vaddr, depth)
		}
		e := m.entries[i]
		k := min(n, (e.end()-vaddr)/pageSize)
		switch {
		case e.flags&pePresent != 0:
			segs = append(segs, segment{vaddr: vaddr, n: k, src: m.pages, off: e.off + int64(vaddr-e.vaddr)})
		case e.flags&peParent != 0:
			if depth+1 == len(chain) {
				if depth+1 > maxParents {
					return nil, fmt.Errorf("%s: %w: more than %d parents", t.name(), errImage, maxParents)
				}
				p, err := readPagemap(filepath.Join(m.dir, "parent"), t.id)
				if err != nil {
					return nil, err
				}
				t.files = append(t.files, p.pages)
				chain = append(chain, p)
			}
			var err error
			if segs, err = t.resolve(chain, depth+1, vaddr, k, segs); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: %w: lazy page %#x has no data (flags %#x)", t.name(), errImage, vaddr, e.flags)
		}
		vaddr += k * pageSize
		n -= k
	}
	return segs, nil
}

func (t *taskImage) name() string { return fmt.Sprintf("pagemap-%d.img", t.id) }

func (t *taskImage) close() {
	for _, f := range t.files {
		f.f.Close()
	}
}

// segment returns the segment holding vaddr.
func (t *taskImage) segment(vaddr uint64) (segment, bool) {
	i := sort.Search(len(t.segs), func(i int) bool { return t.segs[i].end() > vaddr })
	if i < len(t.segs) && t.segs[i].vaddr <= vaddr {
		return t.segs[i], true
	}
	return segment{}, false
}

// vma is one mapping's [start, end).
type vma struct{ start, end uint64 }

// readVMAs reads the mappings of mm-<id>.img in dir.
func readVMAs(dir string, id int) ([]vma, error) {
	path := filepath.Join(dir, fmt.Sprintf("mm-%d.img", id))
	msgs, err := readImage(path, criuimg.MMMagic, maxMMBytes)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("%s: %w: %d entries", path, errImage, len(msgs))
	}
	var e mm.MmEntry
	// Only the mappings are used: the entry's other required fields may
	// be missing.
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(msgs[0], &e); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, errImage, err)
	}
	vmas := make([]vma, 0, len(e.GetVmas()))
	for i, v := range e.GetVmas() {
		s, end := v.GetStart(), v.GetEnd()
		if s%pageSize != 0 || end%pageSize != 0 || s >= end || len(vmas) > 0 && s < vmas[len(vmas)-1].end {
			return nil, fmt.Errorf("%s: %w: mapping %d [%#x, %#x)", path, errImage, i, s, end)
		}
		vmas = append(vmas, vma{s, end})
	}
	return vmas, nil
}

// splitRuns makes the runs of segs, split at the bounds of vmas; a lazy
// page outside every mapping is an error.
func splitRuns(segs []segment, vmas []vma) ([]run, error) {
	var runs []run
	j := 0
	for _, s := range segs {
		for a := s.vaddr; a < s.end(); {
			for j < len(vmas) && vmas[j].end <= a {
				j++
			}
			if j == len(vmas) || vmas[j].start > a {
				return nil, fmt.Errorf("%w: lazy page %#x outside every mapping", errImage, a)
			}
			b := min(s.end(), vmas[j].end)
			if n := len(runs); n > 0 && runs[n-1].end == a && runs[n-1].start >= vmas[j].start {
				runs[n-1].end = b
			} else {
				runs = append(runs, run{start: a, end: b, img: a})
			}
			a = b
		}
	}
	return runs, nil
}

// readPstree returns the pids of the processes pstree.img in dir lists
// (images/pstree.proto, one pstree_entry per process, read by
// read_pstree_image in criu/pstree.c): the pids the restore hands over
// (send_uffd is called with the task's pid in the images).
func readPstree(dir string) ([]int, error) {
	path := filepath.Join(dir, "pstree.img")
	msgs, err := readImage(path, pstreeMagic, maxPstreeBytes)
	if err != nil {
		return nil, err
	}
	if len(msgs) > maxTasks {
		return nil, fmt.Errorf("%s: %w: %d processes", path, errImage, len(msgs))
	}
	pids := make([]int, 0, len(msgs))
	seen := make(map[int]bool, len(msgs))
	for i, b := range msgs {
		var e pstree.PstreeEntry
		// Only the pid is used: the entry's other required fields may be
		// missing.
		if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%s: %w: entry %d: %v", path, errImage, i, err)
		}
		pid := int(e.GetPid())
		if pid <= 0 || pid > maxPID || seen[pid] {
			return nil, fmt.Errorf("%s: %w: entry %d: pid %d", path, errImage, i, pid)
		}
		seen[pid] = true
		pids = append(pids, pid)
	}
	return pids, nil
}
