package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/criuimg"
)

// The images the page server writes, encoded as CRIU does (criu/image.c,
// criu/protobuf.c). A pagemap image is two u32 magics (IMG_COMMON,
// PAGEMAP) and then protobuf messages, each after its u32 size: one
// pagemap_head{pages_id}, then pagemap_entry{vaddr, nr_pages, flags} in
// address order. Its pages image, pages-<pages_id>.img, is raw: the
// present pages of the entries, in order.
const (
	// firstPagesID is where CRIU's own page server numbers its pages
	// images (up_page_ids_base), clear of the ones a dumping CRIU writes.
	firstPagesID = 0x10001

	imageMode = 0o600 // images hold process memory: root only
)

// imageFile is a small image, written through the session's quota.
type imageFile struct {
	f     *os.File
	quota *writeQuota
}

func createImage(dir, name string, q *writeQuota) (*imageFile, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, imageMode)
	if err != nil {
		return nil, err
	}
	return &imageFile{f: f, quota: q}, nil
}

func (f *imageFile) write(p []byte) error {
	if err := f.quota.take(len(p)); err != nil {
		return err
	}
	_, err := f.f.Write(p)
	return err
}

// syncClose makes f durable and closes it.
func syncClose(f *os.File) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	return nil
}

// pagesFile is a pages image. It is written with O_DIRECT where the file
// system allows, straight from the page-aligned chunk buffers: no copy
// into the page cache, which on two cores costs as much as the hashing.
// Writes go at offsets the writer reserves, from the I/O workers.
type pagesFile struct {
	f        *os.File
	off      int64 // end of the reserved space
	inflight sync.WaitGroup
}

func createPagesFile(dir, name string) (*pagesFile, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_DIRECT, imageMode)
	if errors.Is(err, unix.EINVAL) { // no O_DIRECT here (tmpfs)
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, imageMode)
	}
	if err != nil {
		return nil, err
	}
	return &pagesFile{f: f}, nil
}

// reserve returns the offset for the next n bytes; the caller writes them
// with writeAt and marks them done.
func (p *pagesFile) reserve(n int) int64 {
	off := p.off
	p.off += int64(n)
	p.inflight.Add(1)
	return off
}

func (p *pagesFile) writeAt(b []byte, off int64) error {
	defer p.inflight.Done()
	_, err := p.f.WriteAt(b, off)
	return err
}

// pagemapImage writes one pagemap image and its pages image. Adjacent
// entries with equal flags are merged into one.
type pagemapImage struct {
	key     pagemapKey
	pagemap *imageFile
	pages   *pagesFile
	buf     []byte // encoded entries not yet written

	// The entry being extended.
	vaddr  uint64
	nPages uint64
	flags  uint32
}

// createPagemapImage creates the pagemap and pages images of key in dir.
func createPagemapImage(dir string, key pagemapKey, pagesID uint32, q *writeQuota) (*pagemapImage, error) {
	pm, err := createImage(dir, key.fileName(), q)
	if err != nil {
		return nil, err
	}
	pages, err := createPagesFile(dir, fmt.Sprintf("pages-%d.img", pagesID))
	if err != nil {
		pm.f.Close()
		return nil, err
	}
	m := &pagemapImage{key: key, pagemap: pm, pages: pages}
	m.buf = binary.LittleEndian.AppendUint32(m.buf, criuimg.CommonMagic)
	m.buf = binary.LittleEndian.AppendUint32(m.buf, criuimg.PagemapMagic)
	m.buf, err = appendEntry(m.buf, &pagemap.PagemapHead{PagesId: proto.Uint32(pagesID)})
	if err != nil {
		m.abandon()
		return nil, err
	}
	return m, nil
}

// appendEntry appends msg framed as in CRIU images: u32 size, message.
func appendEntry(b []byte, msg proto.Message) ([]byte, error) {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, msg)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b, nil
}

// add records n pages at vaddr with flags; the data of present pages goes
// to the pages image, in the same order.
func (m *pagemapImage) add(vaddr, n uint64, flags uint32) error {
	if m.nPages > 0 && flags == m.flags && vaddr == m.vaddr+m.nPages*pageSize && m.nPages+n <= math.MaxUint32 {
		m.nPages += n
		return nil
	}
	if err := m.flushEntry(); err != nil {
		return err
	}
	m.vaddr, m.nPages, m.flags = vaddr, n, flags
	return nil
}

func (m *pagemapImage) flushEntry() error {
	if m.nPages == 0 {
		return nil
	}
	var err error
	m.buf, err = appendEntry(m.buf, &pagemap.PagemapEntry{
		Vaddr:   proto.Uint64(m.vaddr),
		NrPages: proto.Uint32(uint32(m.nPages)),
		Flags:   proto.Uint32(m.flags),
	})
	m.nPages = 0
	if err != nil || len(m.buf) < 64<<10 {
		return err
	}
	err = m.pagemap.write(m.buf)
	m.buf = m.buf[:0]
	return err
}

// finish writes what is left, waits for the page writes in flight and
// makes both images durable. failed reports a page write's failure.
func (m *pagemapImage) finish(failed func() error) error {
	err := m.flushEntry()
	if err == nil {
		err = m.pagemap.write(m.buf)
	}
	m.pages.inflight.Wait()
	if err == nil {
		err = failed()
	}
	if err != nil {
		m.abandon()
		return err
	}
	err = syncClose(m.pages.f)
	if perr := syncClose(m.pagemap.f); err == nil {
		err = perr
	}
	return err
}

// abandon closes both images, once no page write is in flight.
func (m *pagemapImage) abandon() {
	m.pages.inflight.Wait()
	m.pagemap.f.Close()
	m.pages.f.Close()
}

// writeQuota counts the bytes a session writes, against an optional limit.
type writeQuota struct {
	limit *atomic.Uint64 // 0: none
	used  uint64         // the writer's alone
}

func (q *writeQuota) take(n int) error {
	if limit := q.limit.Load(); limit > 0 && q.used+uint64(n) > limit {
		return fmt.Errorf("%w: past the page server's limit of %d bytes", ErrNoSpace, limit)
	}
	q.used += uint64(n)
	return nil
}

// guard makes writes to w count against the quota.
func (q *writeQuota) guard(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if err := q.take(len(p)); err != nil {
			return 0, err
		}
		return w.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// spaceError classes a full disk (or quota) as ErrNoSpace.
func spaceError(err error) error {
	if err != nil && !errors.Is(err, ErrNoSpace) && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}
