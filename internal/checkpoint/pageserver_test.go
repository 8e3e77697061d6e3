package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/criuimg"
	"github.com/gpusched/gpusched/internal/testutil"
)

// psMemory is a simulated dump: pagemap -> page address -> contents.
type psMemory map[pagemapKey]map[uint64][]byte

// psRandomMemory has, for each key, the given runs of random pages.
func psRandomMemory(seed uint64, runs map[pagemapKey][][2]uint64) psMemory {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := psMemory{}
	for key, rs := range runs {
		m[key] = map[uint64][]byte{}
		for _, r := range rs {
			for i := range r[1] {
				page := make([]byte, pageSize)
				for j := 0; j < pageSize; j += 8 {
					binary.LittleEndian.PutUint64(page[j:], rng.Uint64())
				}
				m[key][r[0]+i*pageSize] = page
			}
		}
	}
	return m
}

func (m psMemory) clone() psMemory {
	c := psMemory{}
	for k, pages := range m {
		c[k] = map[uint64][]byte{}
		for v, p := range pages {
			c[k][v] = slices.Clone(p)
		}
	}
	return c
}

// psClient speaks the dumping side of CRIU's page-server protocol, as
// criu/page-xfer.c does.
type psClient struct {
	t    testing.TB
	conn net.Conn
	wide bool // CRIU 4.2's 32-byte page_server_iov, not 4.1's 24 bytes
	lazy bool // pages go as lazy ones (PE_LAZY)
}

// pageServing is a page server as its tests drive it.
type pageServing interface {
	TakeCRIUEnd() *os.File
	Wait(context.Context) (PageStats, error)
	Close() error
}

// pageServers start a page server of dir over parent with a limit (0:
// none) each way there is: in this process, and as a process of its own,
// the daemon's.
var pageServers = []struct {
	name  string
	start func(t testing.TB, dir, parent string, limit uint64) (pageServing, error)
}{
	{"in-process", func(_ testing.TB, dir, parent string, limit uint64) (pageServing, error) {
		ps, err := startPageServer(dir, parent)
		if err != nil {
			return nil, err
		}
		ps.limit.Store(limit)
		return ps, nil
	}},
	{"process", startPageServerProcess},
}

// startPageServerProcess starts the built daemon binary as dir's page server.
func startPageServerProcess(t testing.TB, dir, parent string, limit uint64) (pageServing, error) {
	ps, err := StartPageServerProcess(context.Background(), PageServerOptions{Path: testutil.Build(t).Daemon, Dir: dir, Parent: parent, Limit: limit})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { ps.Close() })
	return ps, nil
}

// dialPageServer takes CRIU's end of ps's connection.
func dialPageServer(t testing.TB, ps pageServing) *psClient {
	t.Helper()
	f := ps.TakeCRIUEnd()
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &psClient{t: t, conn: conn}
}

func (c *psClient) send(p psi, data []byte) error {
	hdr := binary.LittleEndian.AppendUint32(nil, p.cmd)
	if c.wide {
		hdr = binary.LittleEndian.AppendUint32(hdr, 0) // padding
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(p.nrPages))
	} else {
		hdr = binary.LittleEndian.AppendUint32(hdr, p.nrPages)
	}
	hdr = binary.LittleEndian.AppendUint64(hdr, p.vaddr)
	hdr = binary.LittleEndian.AppendUint64(hdr, p.dstID)
	// One write: a second, even of no bytes, fails with EPIPE once the
	// server has refused the command and hung up, as it may at once.
	_, err := c.conn.Write(append(hdr, data...))
	return err
}

func (c *psClient) answer(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c.conn, b); err != nil {
		c.t.Fatalf("page server answer: %v", err)
	}
	return b
}

// open sends OPEN2 and returns the has-parent answer.
func (c *psClient) open(key pagemapKey) byte {
	c.t.Helper()
	if err := c.send(psi{cmd: psIovOpen2, dstID: key.dstID()}, nil); err != nil {
		c.t.Fatal(err)
	}
	return c.answer(1)[0]
}

// add sends ADD_F with present pages, marked lazy too when c.lazy is set
// (as CRIU marks the pages of a mapping that can be restored lazily,
// ppb_xfer_flags in criu/page-xfer.c).
func (c *psClient) add(key pagemapKey, vaddr uint64, pages []byte) {
	c.t.Helper()
	flags := uint32(pePresent)
	if c.lazy {
		flags |= peLazy
	}
	p := psi{cmd: flags<<psCmdBits | psIovAddF, nrPages: uint32(len(pages) / pageSize), vaddr: vaddr, dstID: key.dstID()}
	if err := c.send(p, pages); err != nil {
		c.t.Fatal(err)
	}
}

// finish sends CLOSE, returns the status and closes the connection.
func (c *psClient) finish() int32 {
	c.t.Helper()
	if err := c.send(psi{cmd: psIovClose}, nil); err != nil {
		c.t.Fatal(err)
	}
	status := int32(binary.LittleEndian.Uint32(c.answer(4)))
	c.conn.Close()
	return status
}

// sendMemory sends m as CRIU does: per pagemap OPEN2, then runs of
// consecutive pages in address order.
func (c *psClient) sendMemory(m psMemory) {
	c.t.Helper()
	keys := slices.SortedFunc(func(yield func(pagemapKey) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}, func(a, b pagemapKey) int { return strings.Compare(a.fileName(), b.fileName()) })
	for _, key := range keys {
		if hp := c.open(key); hp != 0 {
			c.t.Fatalf("OPEN2 %s: has-parent %d, want 0", key, hp)
		}
		addrs := slices.Sorted(func(yield func(uint64) bool) {
			for v := range m[key] {
				if !yield(v) {
					return
				}
			}
		})
		for i := 0; i < len(addrs); {
			j := i + 1
			for j < len(addrs) && addrs[j] == addrs[j-1]+pageSize {
				j++
			}
			var run []byte
			for _, v := range addrs[i:j] {
				run = append(run, m[key][v]...)
			}
			c.add(key, addrs[i], run)
			i = j
		}
	}
}

// psDump dumps m into dir through a page server with parent.
func psDump(t testing.TB, dir, parent string, m psMemory) PageStats {
	t.Helper()
	return psDumpAs(t, dir, parent, m, psClient{})
}

// psDumpAs is psDump as a client like as: speaking CRIU 4.2's wide
// commands, or sending lazy pages.
func psDumpAs(t testing.TB, dir, parent string, m psMemory, as psClient) PageStats {
	t.Helper()
	ps, err := startPageServer(dir, parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	return psTransfer(t, ps, m, as)
}

// psTransfer sends m to ps as a client like as, completely, and returns
// what ps says it wrote.
func psTransfer(t testing.TB, ps pageServing, m psMemory, as psClient) PageStats {
	t.Helper()
	c := dialPageServer(t, ps)
	c.wide, c.lazy = as.wide, as.lazy
	c.sendMemory(m)
	if st := c.finish(); st != 0 {
		t.Fatalf("CLOSE status %d", st)
	}
	stats, err := ps.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// psReadPagemap decodes a pagemap image with go-criu's types.
func psReadPagemap(t testing.TB, path string) (uint32, []*pagemap.PagemapEntry) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if len(data) < 8 || le.Uint32(data) != criuimg.CommonMagic || le.Uint32(data[4:]) != criuimg.PagemapMagic {
		t.Fatalf("%s: bad magic", path)
	}
	data = data[8:]
	next := func(m proto.Message) bool {
		if len(data) == 0 {
			return false
		}
		n := le.Uint32(data)
		if err := proto.Unmarshal(data[4:4+n], m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data = data[4+n:]
		return true
	}
	var head pagemap.PagemapHead
	if !next(&head) {
		t.Fatalf("%s: no head", path)
	}
	var entries []*pagemap.PagemapEntry
	for {
		e := &pagemap.PagemapEntry{}
		if !next(e) {
			return head.GetPagesId(), entries
		}
		entries = append(entries, e)
	}
}

// psRestoreMemory reads key's pages from the image in dir as CRIU's restore
// does: present pages from the pages image, in-parent ones from the image
// that dir/parent links to, recursively.
func psRestoreMemory(t testing.TB, dir string, key pagemapKey) map[uint64][]byte {
	t.Helper()
	pagesID, entries := psReadPagemap(t, filepath.Join(dir, key.fileName()))
	pages, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pages-%d.img", pagesID)))
	if err != nil {
		t.Fatal(err)
	}
	var parent map[uint64][]byte
	out := map[uint64][]byte{}
	for _, e := range entries {
		for i := range uint64(e.GetNrPages()) {
			v := e.GetVaddr() + i*pageSize
			switch {
			case e.GetFlags()&pePresent != 0:
				if len(pages) < pageSize {
					t.Fatalf("%s: pages image too short", dir)
				}
				out[v], pages = pages[:pageSize], pages[pageSize:]
			case e.GetFlags()&peParent != 0:
				if parent == nil {
					parent = psRestoreMemory(t, filepath.Join(dir, "parent"), key)
				}
				p, ok := parent[v]
				if !ok {
					t.Fatalf("%s: page %#x in parent, which lacks it", dir, v)
				}
				out[v] = p
			default:
				t.Fatalf("%s: entry flags %#x", dir, e.GetFlags())
			}
		}
	}
	if len(pages) != 0 {
		t.Fatalf("%s: %d bytes of pages left over", dir, len(pages))
	}
	return out
}

func psCheckImage(t testing.TB, dir string, want psMemory) {
	t.Helper()
	for key, pages := range want {
		got := psRestoreMemory(t, dir, key)
		if len(got) != len(pages) {
			t.Fatalf("%s/%s: %d pages, want %d", dir, key, len(got), len(pages))
		}
		for v, p := range pages {
			if !bytes.Equal(got[v], p) {
				t.Fatalf("%s/%s: page %#x differs", dir, key, v)
			}
		}
	}
}

func psImagesDir(t testing.TB, root, name string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPageServerIndexRoundTrip(t *testing.T) {
	x := hashIndex{}
	task, shm := pagemapKey{id: 42}, pagemapKey{shmem: true, id: 7}
	x[task], x[shm], x[pagemapKey{id: 1}] = &pageHashes{}, &pageHashes{}, &pageHashes{}
	h := func(i byte) pageHash { return pageHash{i, 1, 2} }
	for _, err := range []error{
		x[task].add(0x1000, []pageHash{h(1), h(2)}),
		x[task].add(0x3000, []pageHash{h(3)}), // extends the run
		x[task].add(0x10000, []pageHash{h(4)}),
		x[shm].add(0, []pageHash{h(5)}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := x[task].add(0x2000, []pageHash{h(9)}); err == nil {
		t.Error("add below the last page succeeded")
	}
	if len(x[task].runs) != 2 {
		t.Errorf("runs %+v, want two", x[task].runs)
	}
	var buf bytes.Buffer
	if err := x.encode(&buf); err != nil {
		t.Fatal(err)
	}
	y, err := decodeIndex(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != len(x) {
		t.Fatalf("decoded %d pagemaps, want %d", len(y), len(x))
	}
	for k, h := range x {
		if !slices.Equal(y[k].runs, h.runs) || !slices.Equal(y[k].hashes, h.hashes) {
			t.Errorf("%s: decoded %+v, want %+v", k, y[k], h)
		}
	}
	same := make([]bool, 4)
	if got := y[task].same(0x2000, []pageHash{h(2), h(0), h(4), h(4)}, same); got != 1 || !slices.Equal(same, []bool{true, false, false, false}) {
		t.Errorf("same(0x2000) = %d %v", got, same)
	}
	if got := y[task].same(0xf000, []pageHash{h(0), h(4)}, same[:2]); got != 1 || !slices.Equal(same[:2], []bool{false, true}) {
		t.Errorf("same(0xf000) = %d %v", got, same[:2])
	}

	var empty bytes.Buffer
	if err := (hashIndex{}).encode(&empty); err != nil {
		t.Fatal(err)
	}
	if y, err := decodeIndex(empty.Bytes()); err != nil || len(y) != 0 {
		t.Errorf("empty index decodes to %v, %v", y, err)
	}

	data := buf.Bytes()
	for name, bad := range map[string][]byte{
		"flipped byte": func() []byte { b := slices.Clone(data); b[20] ^= 1; return b }(),
		"truncated":    data[:len(data)-5],
		"empty":        nil,
	} {
		if _, err := decodeIndex(bad); !errors.Is(err, errBadIndex) {
			t.Errorf("%s: decodeIndex = %v, want errBadIndex", name, err)
		}
	}
}

// FuzzPageServerIndex feeds the index decoder bodies with a valid
// checksum, so that it explores the structure behind it.
func FuzzPageServerIndex(f *testing.F) {
	x := hashIndex{{id: 1}: {}, {shmem: true, id: 2}: {}}
	x[pagemapKey{id: 1}].add(0x1000, []pageHash{{1}, {2}})
	x[pagemapKey{id: 1}].add(0x9000, []pageHash{{3}})
	var buf bytes.Buffer
	if err := x.encode(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes()[:buf.Len()-sha256.Size])
	f.Fuzz(func(t *testing.T, body []byte) {
		sum := sha256.Sum256(body)
		data := append(slices.Clip(body), sum[:]...)
		y, err := decodeIndex(data)
		if err != nil {
			if !errors.Is(err, errBadIndex) {
				t.Errorf("decodeIndex error %v is not errBadIndex", err)
			}
			return
		}
		var again bytes.Buffer
		if err := y.encode(&again); err != nil || !bytes.Equal(again.Bytes(), data) {
			t.Errorf("index decodes but does not encode back: %v", err)
		}
	})
}

func TestPageServerWritesOnlyChangedPages(t *testing.T) {
	root := t.TempDir()
	task, shm := pagemapKey{id: 100}, pagemapKey{shmem: true, id: 5}
	memA := psRandomMemory(1, map[pagemapKey][][2]uint64{
		task: {{0x400000, 40}, {0x7f0000000000, 20}},
		shm:  {{0, 4}},
	})
	a := psImagesDir(t, root, "A")
	stA := psDump(t, a, "", memA)
	if stA.Pages != 64 || stA.Reused != 0 || stA.Written < 64*pageSize || stA.Written > 64*pageSize+8<<10 {
		t.Errorf("dump A: %+v, want 64 pages written", stA)
	}
	psCheckImage(t, a, memA)
	if _, err := os.Lstat(filepath.Join(a, "parent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image without parent has a parent link: %v", err)
	}

	// B: two pages change, one region grows, one page goes.
	memB := memA.clone()
	memB[task][0x400000+3*pageSize][0] ^= 1
	memB[task][0x7f0000000000+19*pageSize][pageSize-1] ^= 1
	memB[task][0x400000+40*pageSize] = bytes.Repeat([]byte{7}, pageSize)
	delete(memB[task], 0x400000+10*pageSize)
	b := psImagesDir(t, root, "B")
	stB := psDump(t, b, a, memB)
	if stB.Pages != 64 || stB.Reused != 61 {
		t.Errorf("dump B: %+v, want 64 pages, 61 reused", stB)
	}
	if stB.Written < 3*pageSize || stB.Written > 3*pageSize+8<<10 {
		t.Errorf("dump B wrote %d bytes, want 3 pages and metadata", stB.Written)
	}
	if link, err := os.Readlink(filepath.Join(b, "parent")); err != nil || link != "../A" {
		t.Errorf("B/parent -> %q, %v; want ../A", link, err)
	}
	psCheckImage(t, b, memB)

	// C, from B: the index of B carries A's hashes of the reused pages.
	memC := memB.clone()
	memC[shm][2*pageSize][9] ^= 1
	c := psImagesDir(t, root, "C")
	stC := psDump(t, c, b, memC)
	if stC.Pages != 64 || stC.Reused != 63 {
		t.Errorf("dump C: %+v, want 64 pages, 63 reused", stC)
	}
	psCheckImage(t, c, memC)
	_, entries := psReadPagemap(t, filepath.Join(c, task.fileName()))
	for _, e := range entries {
		if e.GetFlags() != peParent {
			t.Errorf("C/%s: entry %v, want all in parent", task, e)
		}
	}
}

// TestPageServerReusedLazyPagesStayLazy repeats a dump whose pages CRIU
// sent as lazy: the unchanged ones are in the parent and lazy still, so a
// lazy restore leaves them to the lazy-pages server; pages sent as not
// lazy (a stack's) are in the parent only.
func TestPageServerReusedLazyPagesStayLazy(t *testing.T) {
	root := t.TempDir()
	task := pagemapKey{id: 100}
	mem := psRandomMemory(3, map[pagemapKey][][2]uint64{task: {{0x400000, 16}}})
	a := psImagesDir(t, root, "A")
	psDumpAs(t, a, "", mem, psClient{lazy: true})
	b := psImagesDir(t, root, "B")
	if st := psDumpAs(t, b, a, mem, psClient{lazy: true}); st.Reused != 16 {
		t.Fatalf("repeat dump: %+v, want 16 pages reused", st)
	}
	_, entries := psReadPagemap(t, filepath.Join(b, task.fileName()))
	if len(entries) == 0 {
		t.Fatal("repeat dump: no pagemap entries")
	}
	for _, e := range entries {
		if e.GetFlags() != peParent|peLazy {
			t.Errorf("B/%s: entry %v, want in parent and lazy", task, e)
		}
	}
	c := psImagesDir(t, root, "C")
	psDumpAs(t, c, b, mem, psClient{})
	_, entries = psReadPagemap(t, filepath.Join(c, task.fileName()))
	for _, e := range entries {
		if e.GetFlags() != peParent {
			t.Errorf("C/%s: entry %v of pages sent as not lazy, want in parent only", task, e)
		}
	}
}

// TestPageServerCRIU42Commands dumps as CRIU 4.2 does, whose commands are
// 32 bytes (nr_pages a u64, criu commit 7e0da4d97), a full dump and one
// with a parent: the images and the reuse are those of CRIU 4.1's.
func TestPageServerCRIU42Commands(t *testing.T) {
	root := t.TempDir()
	task := pagemapKey{id: 100}
	memA := psRandomMemory(1, map[pagemapKey][][2]uint64{task: {{0x400000, 40}, {0x7f0000000000, 20}}})
	a := psImagesDir(t, root, "A")
	if st := psDumpAs(t, a, "", memA, psClient{wide: true}); st.Pages != 60 || st.Reused != 0 {
		t.Errorf("dump A: %+v, want 60 pages written", st)
	}
	psCheckImage(t, a, memA)
	memB := memA.clone()
	memB[task][0x400000][0] ^= 1
	b := psImagesDir(t, root, "B")
	if st := psDumpAs(t, b, a, memB, psClient{wide: true}); st.Pages != 60 || st.Reused != 59 {
		t.Errorf("dump B: %+v, want 60 pages, 59 reused", st)
	}
	psCheckImage(t, b, memB)
}

func TestPageServerWithoutODirect(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 {
		t.Skip("needs a tmpfs at /dev/shm (a file system without O_DIRECT)")
	}
	root, err := os.MkdirTemp("/dev/shm", "gpusched-ps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	mem := psRandomMemory(4, map[pagemapKey][][2]uint64{{id: 2}: {{0x1000, 300}}})
	a := psImagesDir(t, root, "A")
	psDump(t, a, "", mem)
	psCheckImage(t, a, mem)
}

func TestPageServerParentWithoutIndexWritesEverything(t *testing.T) {
	root := t.TempDir()
	task := pagemapKey{id: 9}
	mem := psRandomMemory(2, map[pagemapKey][][2]uint64{task: {{0x10000, 16}}})
	a := psImagesDir(t, root, "A")
	psDump(t, a, "", mem)
	if err := os.Remove(filepath.Join(a, indexName)); err != nil {
		t.Fatal(err)
	}
	b := psImagesDir(t, root, "B")
	st := psDump(t, b, a, mem)
	if st.Pages != 16 || st.Reused != 0 || st.Written < 16*pageSize {
		t.Errorf("dump over a parent without index: %+v, want every page written", st)
	}
	psCheckImage(t, b, mem)

	// A damaged index, or one naming a pagemap the image lacks, is an
	// error, not a silent full dump.
	if err := os.WriteFile(filepath.Join(a, indexName), []byte(indexMagic+"garbage-garbage-garbage-garbage-garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := startPageServer(psImagesDir(t, root, "C"), a); !errors.Is(err, errBadIndex) {
		t.Errorf("startPageServer over a damaged index = %v, want errBadIndex", err)
	}
	if err := os.Remove(filepath.Join(b, task.fileName())); err != nil {
		t.Fatal(err)
	}
	if _, err := startPageServer(psImagesDir(t, root, "D"), b); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("startPageServer over an image without its pagemap = %v, want ErrNotExist", err)
	}
}

func TestPageServerLimitIsNoSpace(t *testing.T) {
	for _, server := range pageServers {
		t.Run(server.name, func(t *testing.T) {
			dir := t.TempDir()
			ps, err := server.start(t, dir, "", 10*pageSize)
			if err != nil {
				t.Fatal(err)
			}
			c := dialPageServer(t, ps)
			key := pagemapKey{id: 1}
			c.open(key)
			// The server stops reading at the limit: the client may see its
			// writes fail.
			_ = c.send(psi{cmd: pePresent<<psCmdBits | psIovAddF, nrPages: 64, vaddr: 0x1000, dstID: key.dstID()}, make([]byte, 64*pageSize))
			_ = c.send(psi{cmd: psIovClose}, nil)
			st, err := ps.Wait(context.Background())
			if !errors.Is(err, ErrNoSpace) {
				t.Errorf("Wait past the limit = %+v, %v; want ErrNoSpace", st, err)
			}
			if st.Written > 10*pageSize {
				t.Errorf("wrote %d bytes past a limit of %d", st.Written, 10*pageSize)
			}
			if _, err := os.Stat(filepath.Join(dir, indexName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("image past the limit has an index: %v", err)
			}
		})
	}
}

func TestPageServerProtocolEdges(t *testing.T) {
	for _, server := range pageServers {
		t.Run(server.name, func(t *testing.T) { pageServerProtocolEdges(t, server.start) })
	}
}

func pageServerProtocolEdges(t *testing.T, start func(t testing.TB, dir, parent string, limit uint64) (pageServing, error)) {
	dir := t.TempDir()
	key := pagemapKey{id: 3}

	t.Run("parent query and early hang-up", func(t *testing.T) {
		images := psImagesDir(t, dir, "hangup")
		ps, err := start(t, images, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		c := dialPageServer(t, ps)
		if err := c.send(psi{cmd: psIovParent, dstID: key.dstID()}, nil); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(c.answer(4)); got != 0 {
			t.Errorf("PARENT answer %d, want 0", got)
		}
		c.open(key)
		c.add(key, 0x1000, make([]byte, pageSize))
		c.conn.Close()
		if _, err := ps.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "before the transfer was complete") {
			t.Errorf("Wait after a hang-up = %v", err)
		}
		if _, err := os.Stat(filepath.Join(images, indexName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("incomplete image has an index: %v", err)
		}
	})
	t.Run("entry without pages", func(t *testing.T) {
		ps, err := start(t, psImagesDir(t, dir, "hole"), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		c := dialPageServer(t, ps)
		c.open(key)
		if err := c.send(psi{cmd: psIovHole, nrPages: 1, vaddr: 0x1000, dstID: key.dstID()}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("Wait after a hole = %v", err)
		}
	})
	t.Run("close before connect", func(t *testing.T) {
		ps, err := start(t, psImagesDir(t, dir, "unused"), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ps.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Wait(context.Background()); !errors.Is(err, errServerClosed) {
			t.Errorf("Wait after Close = %v", err)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		ps, err := start(t, psImagesDir(t, dir, "ctx"), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		c := dialPageServer(t, ps)
		c.open(key)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := ps.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(cancelled) = %v", err)
		}
		if _, err := c.conn.Read(make([]byte, 1)); err == nil {
			t.Error("connection still open after Wait gave up")
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		if _, err := start(t, filepath.Join(dir, "missing"), "", 0); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("a page server of a missing dir: %v; want it refused", err)
		}
		same := psImagesDir(t, dir, "self")
		if _, err := start(t, same, same, 0); err == nil || !strings.Contains(err.Error(), "itself") {
			t.Errorf("a page server whose parent is its own dir: %v; want it refused", err)
		}
	})
}

// criuJob is a gpusched-simjob with patterned host memory and a tick
// counter, in its own session with its output in a log file, dumped and
// restored with the criu CLI. The restore makes it a sibling of criu, so
// the test process is its parent and reaps it.
type criuJob struct {
	t    testing.TB
	criu string
	log  string
	pid  int
	proc *os.Process // nil while dumped
}

func startCRIUJob(t testing.TB, criu, dir string, hostMiB int) *criuJob {
	t.Helper()
	bins := testutil.Build(t)
	j := &criuJob{t: t, criu: criu, log: filepath.Join(dir, "job.log")}
	f, err := os.OpenFile(j.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bins.SimJob, "--host-mem", strconv.Itoa(hostMiB), "--tick", "0.02")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j.pid, j.proc = cmd.Process.Pid, cmd.Process
	t.Cleanup(j.kill)
	j.waitFor(func(s string) bool { return strings.Contains(s, "tick 3\n") }, "tick 3")
	return j
}

func (j *criuJob) kill() {
	if j.proc != nil {
		j.proc.Kill()
		j.proc.Wait()
		j.proc = nil
	}
}

// reap waits for the dumped (killed) process, so that its pid is free.
func (j *criuJob) reap() {
	j.t.Helper()
	st, err := j.proc.Wait()
	j.proc = nil
	if err != nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		j.t.Fatalf("dumped job ended with %v, %v; want killed by criu", st, err)
	}
}

// waitFor polls the log until ok accepts it.
func (j *criuJob) waitFor(ok func(string) bool, what string) string {
	j.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(j.log)
		if ok(string(b)) {
			return string(b)
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("job log never showed %s:\n%s", what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var psTickRE = regexp.MustCompile(`(?m)^tick (\d+)$`)

// ticks are the counter values in the log, which must count up by one.
func (j *criuJob) ticks(log string) []int {
	j.t.Helper()
	var ticks []int
	for _, m := range psTickRE.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		if len(ticks) > 0 && n != ticks[len(ticks)-1]+1 {
			j.t.Fatalf("tick %d after tick %d: the counter did not survive", n, ticks[len(ticks)-1])
		}
		ticks = append(ticks, n)
	}
	return ticks
}

func (j *criuJob) runCRIU(args ...string) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, j.criu, args...).CombinedOutput(); err != nil {
		dir := args[slices.Index(args, "-D")+1]
		logs, _ := os.ReadFile(filepath.Join(dir, args[slices.Index(args, "-o")+1]))
		j.t.Fatalf("criu %s: %v\n%s\n%s", args[0], err, out, psErrorLines(string(logs)))
	}
}

// dumpThrough dumps the job into dir with its pages through ps, as the
// daemon does: a CRIU swrk worker with ps's socket.
func (j *criuJob) dumpThrough(ps pageServing, dir string, leave Leave) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := NewCRIU(ctx, CRIUOptions{Path: j.criu})
	if err != nil {
		j.t.Fatal(err)
	}
	if err := c.Dump(ctx, DumpOpts{Dir: dir, PID: j.pid, Leave: leave, PageServer: ps.TakeCRIUEnd()}); err != nil {
		j.t.Fatal(err)
	}
}

func psErrorLines(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if strings.Contains(line, "Error") || strings.Contains(line, "Warn") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// dump checkpoints the job into dir through a page server process with
// parent, as the daemon does, and reaps it.
func (j *criuJob) dump(dir, parent string) PageStats {
	j.t.Helper()
	ps, err := startPageServerProcess(j.t, dir, parent, 0)
	if err != nil {
		j.t.Fatal(err)
	}
	j.dumpThrough(ps, dir, LeaveDead)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stats, err := ps.Wait(ctx)
	if err != nil {
		j.t.Fatal(err)
	}
	j.reap()
	return stats
}

// restore brings the job back from dir and checks that it runs on with
// its counter and memory intact.
func (j *criuJob) restore(dir string) {
	j.t.Helper()
	before := j.ticks(j.waitFor(func(string) bool { return true }, "anything"))
	// The daemon's dumps are taken with tcp_close, which a restore must
	// name too (criu/image.c check_img_inventory).
	j.runCRIU("restore", "-D", dir, "--restore-sibling", "--restore-detached", "--tcp-close", "-o", "restore.log", "-v2")
	proc, err := os.FindProcess(j.pid)
	if err != nil {
		j.t.Fatal(err)
	}
	j.proc = proc
	last := before[len(before)-1]
	log := j.waitFor(func(s string) bool { return strings.Contains(s, fmt.Sprintf("tick %d\n", last+3)) }, fmt.Sprintf("tick %d", last+3))
	j.ticks(log)
	verified := strings.Count(log, "simjob: host memory verified")
	if err := proc.Signal(syscall.SIGUSR1); err != nil {
		j.t.Fatal(err)
	}
	j.waitFor(func(s string) bool {
		return strings.Count(s, "simjob: host memory verified") > verified || strings.Contains(s, "corrupt")
	}, "the memory verified")
	if log, _ := os.ReadFile(j.log); strings.Contains(string(log), "corrupt") {
		j.t.Fatalf("restored from %s with corrupt memory:\n%s", dir, log)
	}
}

func TestPageServerCRIUFullDumpRestores(t *testing.T) {
	criu := testutil.CRIU(t)
	root := t.TempDir()
	j := startCRIUJob(t, criu, root, 64)
	a := psImagesDir(t, root, "A")
	st := j.dump(a, "")
	t.Logf("full dump: %d pages, %d reused, %d bytes written", st.Pages, st.Reused, st.Written)
	if st.Pages < 64<<20/pageSize || st.Reused != 0 || st.Written < st.Pages*pageSize {
		t.Errorf("full dump stats %+v: want the 64 MiB written", st)
	}
	j.restore(a)
}

func TestPageServerCRIURepeatDumpWritesChangesOnly(t *testing.T) {
	criu := testutil.CRIU(t)
	root := t.TempDir()
	j := startCRIUJob(t, criu, root, 64)
	a := psImagesDir(t, root, "A")
	stA := j.dump(a, "")
	j.restore(a)

	b := psImagesDir(t, root, "B")
	stB := j.dump(b, a)
	t.Logf("repeat dump: %d pages, %d reused, %d bytes written (full dump: %d bytes)", stB.Pages, stB.Reused, stB.Written, stA.Written)
	if stB.Reused < stB.Pages*9/10 || stB.Written >= stA.Pages*pageSize/10 {
		t.Errorf("repeat dump %+v: want most pages reused and < 10%% of %d bytes written", stB, stA.Pages*pageSize)
	}
	j.restore(b)

	c := psImagesDir(t, root, "C")
	stC := j.dump(c, b)
	t.Logf("third dump: %d pages, %d reused, %d bytes written", stC.Pages, stC.Reused, stC.Written)
	if stC.Reused < stC.Pages*9/10 {
		t.Errorf("third dump %+v: want most pages reused", stC)
	}
	j.restore(c)
}
