package checkpoint

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/zeebo/xxh3"
)

// The page-hash index lists, for every pagemap of an image, the hash of
// every page the image holds, stored in it or left in its parent; so the
// next dump needs only this image's index, never the chain. It is written
// last, once the pagemaps are durable: an index means a complete image.
//
// Format, little endian:
//
//	"GSPHASH1"                         magic
//	u32 pagemaps
//	per pagemap, tasks before shmem, by id:
//	  u8 kind (1 task, 2 shmem), u64 id, u32 runs, u64 pages
//	  runs x {u64 vaddr, u64 pages}    ascending, disjoint, page-aligned
//	  pages x 16-byte hash             in address order
//	SHA-256 of everything above
const (
	indexName  = "gpusched-pagehash.bin"
	indexMagic = "GSPHASH2"
	hashSize   = 16
)

// pageHash is a page's XXH3-128. A collision would leave a changed page to
// the parent's copy; for pages compared with the page at the same address
// of the same process's previous image that is out of reach (2^-128 per
// changed page), and only a process crafting its own memory against a
// non-cryptographic hash could aim at one, hurting no one but itself.
// SHA-256 (1.7 GB/s a core here) made hashing the dump's bottleneck.
type pageHash [hashSize]byte

func hashPage(p []byte) pageHash { return xxh3.Hash128(p).Bytes() }

// pageRun is a run of consecutive pages; first indexes its first hash.
type pageRun struct{ vaddr, n, first uint64 }

func (r pageRun) end() uint64 { return r.vaddr + r.n*pageSize }

// pageHashes are one pagemap's pages and their hashes, in address order.
type pageHashes struct {
	runs   []pageRun
	hashes []pageHash
}

// add appends pages at vaddr, above every page already there.
func (h *pageHashes) add(vaddr uint64, hs []pageHash) error {
	if len(hs) == 0 {
		return nil
	}
	if k := len(h.runs); k > 0 {
		last := &h.runs[k-1]
		if vaddr < last.end() {
			return fmt.Errorf("page %#x arrived after page %#x", vaddr, last.end()-pageSize)
		}
		if vaddr == last.end() {
			last.n += uint64(len(hs))
			h.hashes = append(h.hashes, hs...)
			return nil
		}
	}
	h.runs = append(h.runs, pageRun{vaddr: vaddr, n: uint64(len(hs)), first: uint64(len(h.hashes))})
	h.hashes = append(h.hashes, hs...)
	return nil
}

// same sets same[i] when the page at vaddr+i*pageSize is there with hash
// hs[i], and counts them. It only reads h.
func (h *pageHashes) same(vaddr uint64, hs []pageHash, same []bool) int {
	r := sort.Search(len(h.runs), func(i int) bool { return h.runs[i].end() > vaddr })
	count := 0
	for i := range hs {
		a := vaddr + uint64(i)*pageSize
		for r < len(h.runs) && h.runs[r].end() <= a {
			r++
		}
		same[i] = r < len(h.runs) && a >= h.runs[r].vaddr &&
			h.hashes[h.runs[r].first+(a-h.runs[r].vaddr)/pageSize] == hs[i]
		if same[i] {
			count++
		}
	}
	return count
}

// hashIndex is an image's index, by pagemap.
type hashIndex map[pagemapKey]*pageHashes

// keys are x's pagemaps in the index's order: tasks, then shmem, by id.
func (x hashIndex) keys() []pagemapKey {
	keys := make([]pagemapKey, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

func compareKeys(a, b pagemapKey) int {
	if a.shmem != b.shmem {
		if a.shmem {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.id, b.id)
}

// encode writes the index to w.
func (x hashIndex) encode(w io.Writer) error {
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 256<<10)
	le := binary.LittleEndian
	if _, err := bw.Write(le.AppendUint32([]byte(indexMagic), uint32(len(x)))); err != nil {
		return err
	}
	var b []byte
	for _, k := range x.keys() {
		h := x[k]
		kind := byte(psTypePID)
		if k.shmem {
			kind = psTypeShm
		}
		b = append(b[:0], kind)
		b = le.AppendUint64(b, k.id)
		b = le.AppendUint32(b, uint32(len(h.runs)))
		b = le.AppendUint64(b, uint64(len(h.hashes)))
		for _, r := range h.runs {
			b = le.AppendUint64(b, r.vaddr)
			b = le.AppendUint64(b, r.n)
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
		for i := range h.hashes {
			if _, err := bw.Write(h.hashes[i][:]); err != nil {
				return err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

var errBadIndex = errors.New("malformed page-hash index")

// decodeIndex parses and checks an encoded index.
func decodeIndex(data []byte) (hashIndex, error) {
	if len(data) < len(indexMagic)+4+sha256.Size || string(data[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("%w: no header", errBadIndex)
	}
	body := data[:len(data)-sha256.Size]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], data[len(body):]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadIndex)
	}
	d := indexDecoder{b: body[len(indexMagic):]}
	n := d.u32()
	x := make(hashIndex)
	var prev pagemapKey
	for i := range n {
		kind, id, nRuns, nPages := d.u8(), d.u64(), d.u32(), d.u64()
		if d.err != nil {
			break
		}
		if kind != psTypePID && kind != psTypeShm {
			return nil, fmt.Errorf("%w: pagemap kind %d", errBadIndex, kind)
		}
		key := pagemapKey{shmem: kind == psTypeShm, id: id}
		if i > 0 && compareKeys(prev, key) >= 0 {
			return nil, fmt.Errorf("%w: %s out of order", errBadIndex, key)
		}
		prev = key
		if uint64(nRuns) > uint64(d.left())/16 || nPages > uint64(d.left())/hashSize {
			return nil, fmt.Errorf("%w: %s: %d runs, %d pages past the end", errBadIndex, key, nRuns, nPages)
		}
		h := &pageHashes{runs: make([]pageRun, 0, nRuns), hashes: make([]pageHash, nPages)}
		var total, end uint64
		for i := range nRuns {
			r := pageRun{vaddr: d.u64(), n: d.u64(), first: total}
			if r.vaddr%pageSize != 0 || r.n == 0 || r.n > nPages-total || (i > 0 && r.vaddr < end) || r.end() < r.vaddr {
				return nil, fmt.Errorf("%w: %s: bad run %d", errBadIndex, key, i)
			}
			h.runs = append(h.runs, r)
			total += r.n
			end = r.end()
		}
		if total != nPages {
			return nil, fmt.Errorf("%w: %s: runs hold %d pages, not %d", errBadIndex, key, total, nPages)
		}
		for i := range h.hashes {
			copy(h.hashes[i][:], d.next(hashSize))
		}
		x[key] = h
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", errBadIndex, d.err)
	}
	if d.left() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadIndex, d.left())
	}
	return x, nil
}

// indexDecoder reads little-endian fields; past the end it returns zeros
// and remembers the error.
type indexDecoder struct {
	b   []byte
	err error
}

func (d *indexDecoder) left() int { return len(d.b) }

func (d *indexDecoder) next(n int) []byte {
	if d.err != nil || len(d.b) < n {
		if d.err == nil {
			d.err = io.ErrUnexpectedEOF
		}
		return make([]byte, n)
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *indexDecoder) u8() byte    { return d.next(1)[0] }
func (d *indexDecoder) u32() uint32 { return binary.LittleEndian.Uint32(d.next(4)) }
func (d *indexDecoder) u64() uint64 { return binary.LittleEndian.Uint64(d.next(8)) }

// readIndex reads dir's index; an image without one gives nil, nil. The
// pagemaps it names must be there.
func readIndex(dir string) (hashIndex, error) {
	path := filepath.Join(dir, indexName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	x, err := decodeIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k := range x {
		if _, err := os.Stat(filepath.Join(dir, k.fileName())); err != nil {
			return nil, fmt.Errorf("%s: the image lacks a pagemap it lists: %w", path, err)
		}
	}
	return x, nil
}

// writeIndex writes dir's index durably (the caller syncs dir).
func writeIndex(dir string, x hashIndex, q *writeQuota) error {
	path := filepath.Join(dir, indexName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, imageMode)
	if err != nil {
		return err
	}
	err = x.encode(q.guard(f))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
