package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// The images the page server writes, encoded as CRIU does (criu/image.c,
// criu/protobuf.c). A pagemap image is two u32 magics (IMG_COMMON,
// PAGEMAP) and then protobuf messages, each after its u32 size: one
// pagemap_head{pages_id}, then pagemap_entry{vaddr, nr_pages, flags} in
// address order. Its pages image, pages-<pages_id>.img, is raw: the
// present pages of the entries, in order.
const (
	imgCommonMagic = 0x54564319
	pagemapMagic   = 0x56084025

	// firstPagesID is where CRIU's own page server numbers its pages
	// images (up_page_ids_base), clear of the ones a dumping CRIU writes.
	firstPagesID = 0x10001

	imageMode = 0o600 // images hold process memory: root only

	// writebackEvery bytes, an image file starts writeback of what it
	// has written, so the final fsync has little left to wait for.
	writebackEvery = 8 << 20
)

// imageFile is an image being written, within the session's quota.
type imageFile struct {
	f       *os.File
	quota   *writeQuota
	written int64
	flushed int64 // bytes whose writeback has been started
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
	n, err := f.f.Write(p)
	f.written += int64(n)
	if err != nil {
		return err
	}
	if f.written-f.flushed >= writebackEvery {
		// Only a hint: the closing fsync is what makes the data durable.
		_ = unix.SyncFileRange(int(f.f.Fd()), f.flushed, f.written-f.flushed, unix.SYNC_FILE_RANGE_WRITE)
		f.flushed = f.written
	}
	return nil
}

// sync makes the file durable and closes it.
func (f *imageFile) sync() error {
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.f.Name(), err)
	}
	return nil
}

func (f *imageFile) abandon() { f.f.Close() }

// pagemapImage writes one pagemap image and its pages image. Adjacent
// entries with equal flags are merged into one.
type pagemapImage struct {
	key     pagemapKey
	pagemap *imageFile
	pages   *imageFile
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
	pages, err := createImage(dir, fmt.Sprintf("pages-%d.img", pagesID), q)
	if err != nil {
		pm.abandon()
		return nil, err
	}
	m := &pagemapImage{key: key, pagemap: pm, pages: pages}
	m.buf = binary.LittleEndian.AppendUint32(m.buf, imgCommonMagic)
	m.buf = binary.LittleEndian.AppendUint32(m.buf, pagemapMagic)
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

// add records n pages at vaddr with flags; present pages' data is written
// by the caller, in order, with writePages.
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

func (m *pagemapImage) writePages(p []byte) error { return m.pages.write(p) }

// finish writes what is left and makes both images durable.
func (m *pagemapImage) finish() error {
	err := m.flushEntry()
	if err == nil {
		err = m.pagemap.write(m.buf)
	}
	if err != nil {
		m.abandon()
		return err
	}
	err = m.pages.sync()
	if perr := m.pagemap.sync(); err == nil {
		err = perr
	}
	return err
}

func (m *pagemapImage) abandon() {
	m.pagemap.abandon()
	m.pages.abandon()
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
