package lazypages

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	vmaimg "github.com/checkpoint-restore/go-criu/v7/crit/images/vma"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/gpusched/gpusched/internal/criuimg"
)

// TestMain runs the test binary as the server when it is started under
// ServerArgv0, as gpuschedd is.
func TestMain(m *testing.M) {
	if IsServer() {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// What CRIU's restore does with a userfaultfd before it hands it over
// (uffd_open in criu/uffd.c, and the restorer's registration of a lazy
// mapping in criu/pie/restorer.c), from include/uapi/linux/userfaultfd.h.
const (
	uffdioAPI      = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdAPI        = 0xAA
	// NEED_UFFD_API_FEATURES: EVENT_FORK, EVENT_REMAP, EVENT_REMOVE, EVENT_UNMAP.
	uffdFeatures    = 1<<1 | 1<<2 | 1<<3 | 1<<6
	registerMissing = 1 << 0
)

// region is an anonymous mapping of this process registered with a
// userfaultfd, as a lazily restored mapping is.
type region struct {
	mem  []byte
	addr uint64
	uffd int
}

func newRegion(t testing.TB, pages int) *region {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		t.Skipf("userfaultfd: %v", e)
	}
	api := [3]uint64{uffdAPI, uffdFeatures, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); e != 0 {
		unix.Close(int(fd))
		t.Skipf("UFFDIO_API with the non-cooperative events: %v", e)
	}
	r := &region{mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), uffd: int(fd)}
	// A userfaultfd never handed over is closed before the munmap, which
	// would wait for a reader to take its UNMAP event.
	t.Cleanup(func() {
		if r.uffd >= 0 {
			unix.Close(r.uffd)
		}
	})
	reg := [4]uint64{r.addr, uint64(len(mem)), registerMissing, 0}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); e != 0 {
		t.Fatalf("UFFDIO_REGISTER: %v", e)
	}
	return r
}

func (r *region) page(i int) []byte { return r.mem[i*pageSize : (i+1)*pageSize] }

// ent is a pagemap entry of a test image, in pages from the region's start.
type ent struct {
	first, n int
	flags    uint32
}

// writeImages writes the images of task id in dir as CRIU and our page
// server write them (see image.go): its pagemap of ents at base, their
// present pages taken from data (the region's intended contents, page i
// at data[i*pageSize:]) into pages-<pagesID>.img, an mm image with one
// mapping of pages pages at base, and a pstree image of it alone.
func writeImages(t testing.TB, dir string, id int, pagesID uint32, base uint64, pages int, ents []ent, data []byte) {
	t.Helper()
	pm := []proto.Message{&pagemap.PagemapHead{PagesId: proto.Uint32(pagesID)}}
	var raw []byte
	for _, e := range ents {
		pm = append(pm, &pagemap.PagemapEntry{
			Vaddr: proto.Uint64(base + uint64(e.first*pageSize)), NrPages: proto.Uint32(uint32(e.n)), Flags: proto.Uint32(e.flags),
		})
		if e.flags&pePresent != 0 {
			raw = append(raw, data[e.first*pageSize:(e.first+e.n)*pageSize]...)
		}
	}
	writeImage(t, filepath.Join(dir, "pagemap-"+itoa(id)+".img"), criuimg.PagemapMagic, pm...)
	if err := os.WriteFile(filepath.Join(dir, "pages-"+itoa(int(pagesID))+".img"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	end := base + uint64(pages*pageSize)
	writeImage(t, filepath.Join(dir, "mm-"+itoa(id)+".img"), criuimg.MMMagic, &mm.MmEntry{Vmas: []*vmaimg.VmaEntry{{Start: &base, End: &end}}})
	writePstree(t, dir, id)
}

// writePstree writes dir's pstree.img as CRIU dumps it (dump_pstree in
// criu/pstree.c): one entry per process, the first the root.
func writePstree(t testing.TB, dir string, pids ...int) {
	t.Helper()
	var msgs []proto.Message
	for _, pid := range pids {
		p := uint32(pid)
		msgs = append(msgs, &pstree.PstreeEntry{Pid: &p, Ppid: proto.Uint32(0), Pgid: &p, Sid: &p, Threads: []uint32{p}})
	}
	writeImage(t, filepath.Join(dir, "pstree.img"), pstreeMagic, msgs...)
}

func itoa(i int) string { return strconv.Itoa(i) }

func writeImage(t testing.TB, path string, magic uint32, msgs ...proto.Message) {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, criuimg.CommonMagic)
	b = binary.LittleEndian.AppendUint32(b, magic)
	for _, m := range msgs {
		mb, err := proto.MarshalOptions{AllowPartial: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(mb)))
		b = append(b, mb...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomPages(t testing.TB, pages int) []byte {
	b := make([]byte, pages*pageSize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// restore is the restore's end of the protocol, as criu/uffd.c speaks it.
type restore struct {
	t    testing.TB
	conn *net.UnixConn
	srv  *Server
}

// lazyImage maps a region of pages pages and writes the images of one
// process (pid 1) whose every page is lazy, with random data: the
// region, the data and the images directory.
func lazyImage(t *testing.T, pages int) (*region, []byte, string) {
	t.Helper()
	reg := newRegion(t, pages)
	data := randomPages(t, pages)
	dir := t.TempDir()
	writeImages(t, dir, 1, 1, reg.addr, pages, []ent{{0, pages, peLazy | pePresent}}, data)
	return reg, data, dir
}

// startServer starts the server (this test binary as gpuschedd) on dir,
// reading ahead with ahead, and connects to it as CRIU's restore does.
func startServer(t testing.TB, dir string, ahead ...bool) *restore {
	t.Helper()
	return startServerWith(t, Options{Dir: dir, ReadAhead: len(ahead) > 0 && ahead[0]})
}

// startServerWith is startServer with o (its Path and Env set here).
func startServerWith(t testing.TB, o Options) *restore {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.Path, o.Env = exe, []string{"GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"}
	srv, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(o.Dir, SocketName), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &restore{t: t, conn: conn, srv: srv}
}

func (r *restore) sendInt(v int32) {
	r.t.Helper()
	if _, err := r.conn.Write(binary.NativeEndian.AppendUint32(nil, uint32(v))); err != nil {
		r.t.Fatal(err)
	}
}

// send hands over a process's userfaultfd (send_uffd) and closes this
// process's copy: the server's is then the only one, and its exit ends
// the registration.
func (r *restore) send(pid int32, reg *region) {
	r.t.Helper()
	r.sendInt(pid)
	if _, _, err := r.conn.WriteMsgUnix([]byte{0}, unix.UnixRights(reg.uffd), nil); err != nil {
		r.t.Fatal(err)
	}
	unix.Close(reg.uffd)
	reg.uffd = -1
}

// finish says the restore finished (lazy_pages_finish_restore) and waits
// for the server.
func (r *restore) finish() error {
	r.t.Helper()
	r.sendInt(restoreFinished)
	r.conn.Close()
	r.srv.Running()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.srv.Wait(ctx)
}

func equalPages(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		for i := 0; i < len(got); i += pageSize {
			if !bytes.Equal(got[i:i+pageSize], want[i:i+pageSize]) {
				t.Fatalf("%s: page %d differs from the image", what, i/pageSize)
			}
		}
	}
}

// TestServe serves a region of a real process: a fault before the
// restore finished is answered from the image at once (the background
// transfer starts only after it), and once the server has exited every
// lazy page holds the image's data, across several reads and copies; a
// page of the mapping in no entry is zero, and a page CRIU restored itself
// (present, not lazy) is left alone. It does so with its image loaded
// ahead from pstree.img (beside a zombie's pid, which has no image), with
// and without ReadAhead, and loaded as the process is handed over, when
// pstree.img is missing or bad.
func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pstree func(t *testing.T, dir string)
		log    string
		ahead  bool
	}{
		{"read ahead", func(t *testing.T, dir string) { writePstree(t, dir, 7, 8) }, "lazy pages of 1 processes in", true},
		{"loaded ahead", func(t *testing.T, dir string) { writePstree(t, dir, 7, 8) }, "lazy pages of 1 processes in", false},
		{"no pstree", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "pstree.img")); err != nil {
				t.Fatal(err)
			}
		}, "no read-ahead: open ", true},
		{"bad pstree", func(t *testing.T, dir string) { writePstree(t, dir, 7, 7) }, "entry 1: pid 7", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testServe(t, tc.pstree, tc.log, tc.ahead) })
	}
}

func testServe(t *testing.T, pstree func(t *testing.T, dir string), log string, ahead bool) {
	const pages = 8*readChunk/pageSize + 300
	reg := newRegion(t, pages)
	data := randomPages(t, pages)
	dir := t.TempDir()
	writeImages(t, dir, 7, 1, reg.addr, pages, []ent{
		{0, 1, pePresent},
		{1, 99, peLazy | pePresent},
		// pages 100-109: never touched at the dump
		{110, pages - 110, peLazy | pePresent},
	}, data)
	pstree(t, dir)
	r := startServer(t, dir, ahead)
	r.send(7, reg)

	equalPages(t, "page faulted before the restore finished", reg.page(2000), data[2000*pageSize:2001*pageSize])
	mine := bytes.Repeat([]byte{0xA5}, pageSize)
	copy(reg.page(0), mine) // faults: the zero page, then this write

	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "non-lazy page", reg.page(0), mine)
	equalPages(t, "lazy pages 1-99", reg.mem[pageSize:100*pageSize], data[pageSize:100*pageSize])
	equalPages(t, "untouched pages", reg.mem[100*pageSize:110*pageSize], make([]byte, 10*pageSize))
	equalPages(t, "lazy pages from 110", reg.mem[110*pageSize:], data[110*pageSize:])
	if b, _ := os.ReadFile(filepath.Join(dir, LogName)); !strings.Contains(string(b), log) {
		t.Fatalf("the server's log does not say %q:\n%s", log, b)
	}
}

// TestServeReadsAhead: with ReadAhead the server reads the pages image as
// it starts, before the restore hands over a process, and what it read
// then is copied once the processes run.
func TestServeReadsAhead(t *testing.T) {
	const pages = 4 * readChunk / pageSize
	reg, data, dir := lazyImage(t, pages)
	r := startServer(t, dir, true)
	awaitRead(t, r.srv, pages*pageSize)
	r.send(1, reg)
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "every page", reg.mem, data)
	// The server counts a read after it returned: the last ones may not
	// be counted yet, but those their readers made before them are.
	b, _ := os.ReadFile(filepath.Join(dir, LogName))
	if m := regexp.MustCompile(`(\d+) MiB read before the copies began`).FindSubmatch(b); m == nil || string(m[1]) == "0" {
		t.Fatalf("the server's log does not count the image as read ahead:\n%s", b)
	}
}

// readBytes is what the server has read so far (rchar in /proc/PID/io).
func readBytes(t *testing.T, srv *Server) int {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/io", srv.cmd.Process.Pid)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rchar int
	if _, err := fmt.Sscanf(string(b), "rchar: %d", &rchar); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rchar
}

// awaitRead waits until the server has read n bytes (rchar in
// /proc/PID/io: its reads and preads, the images' included). Nothing
// the server does can be awaited from here but its reads, so they are
// polled.
func awaitRead(t *testing.T, srv *Server, n int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if readBytes(t, srv) >= n {
			return
		}
		select {
		case <-tick.C:
		case <-srv.done:
			t.Fatalf("the server ended: %v", srv.err)
		case <-deadline:
			t.Fatalf("the server read %d bytes before the restore handed a process over, not the %d of its image", readBytes(t, srv), n)
		}
	}
}

// TestServeWaitsUntilRunning: after the restore said it finished, and
// until its starter says the processes run, the server answers faults and
// brings in nothing else: CRIU's restore touches the processes after
// finishing, and a fault behind the background reads held it up.
func TestServeWaitsUntilRunning(t *testing.T) {
	const pages = 4 * readChunk / pageSize
	reg, data, dir := lazyImage(t, pages)
	r := startServer(t, dir)
	r.send(1, reg)
	r.sendInt(restoreFinished)
	r.conn.Close()
	// The fault is answered after the server took the restore's end (the
	// messages are read in order), while it waits for Running.
	equalPages(t, "page faulted after the restore finished", reg.page(pages-1), data[(pages-1)*pageSize:])
	// Nothing to await: the transfer must not happen. A second is many
	// times what this one takes once started.
	select {
	case <-r.srv.done:
		t.Fatalf("the server ended before the processes ran: %v", r.srv.err)
	case <-time.After(time.Second):
	}
	if in := residentPages(t, reg.mem); in != 1 {
		// The fault brings its page and what follows in its run: here the
		// region's last page alone.
		t.Fatalf("%d pages in before the processes run, want only the faulted one", in)
	}
	// Without ReadAhead the images are not read either, but for the fault.
	if n := readBytes(t, r.srv); n >= pages*pageSize/2 {
		t.Fatalf("the server read %d bytes before the processes ran", n)
	}
	r.srv.Running()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.srv.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "every page once running", reg.mem, data)
}

// residentPages counts the pages of mem in memory (mincore).
func residentPages(t *testing.T, mem []byte) int {
	t.Helper()
	vec := make([]byte, len(mem)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestServeMappingChanges changes the mappings while pages are out, as
// uffd.c's event handlers expect: pages dropped with MADV_DONTNEED read
// zero afterwards (the server must not fill them from the image), an
// unmapped range is not waited for, and a range moved with mremap gets
// its pages at its new address.
func TestServeMappingChanges(t *testing.T) {
	const pages = 64
	reg, data, dir := lazyImage(t, pages)
	r := startServer(t, dir, true)
	awaitRead(t, r.srv, pages*pageSize) // the changes meet pages read ahead
	r.send(1, reg)

	if err := unix.Madvise(reg.mem[10*pageSize:20*pageSize], unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(reg.addr)+30*pageSize, 10*pageSize, 0); e != 0 {
		t.Fatalf("munmap: %v", e)
	}
	dst, err := unix.Mmap(-1, 0, 10*pageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	to := uintptr(unsafe.Pointer(&dst[0]))
	if _, _, e := unix.Syscall6(unix.SYS_MREMAP, uintptr(reg.addr)+50*pageSize, 10*pageSize, 10*pageSize,
		unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, to, 0); e != 0 {
		t.Fatalf("mremap: %v", e)
	}
	t.Cleanup(func() { _ = unix.Munmap(dst) })

	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "pages before the dropped ones", reg.mem[:10*pageSize], data[:10*pageSize])
	equalPages(t, "dropped pages", reg.mem[10*pageSize:20*pageSize], make([]byte, 10*pageSize))
	equalPages(t, "pages between", reg.mem[20*pageSize:30*pageSize], data[20*pageSize:30*pageSize])
	equalPages(t, "moved pages", dst, data[50*pageSize:60*pageSize])
	equalPages(t, "pages after", reg.mem[60*pageSize:], data[60*pageSize:])
}

// TestServeFromParent serves an incremental image whose lazy entry is in
// its parent (PE_LAZY|PE_PARENT): the data come from the parent's pages
// image through the "parent" link, as criu/pagemap.c reads them.
func TestServeFromParent(t *testing.T) {
	const pages = 32
	reg := newRegion(t, pages)
	old, cur := randomPages(t, pages), randomPages(t, pages)
	parent, dir := t.TempDir(), t.TempDir()
	writeImages(t, parent, 3, 1, reg.addr, pages, []ent{{0, pages, peLazy | pePresent}}, old)
	writeImages(t, dir, 3, 2, reg.addr, pages, []ent{{0, 16, peLazy | peParent}, {16, 16, peLazy | pePresent}}, cur)
	if err := os.Symlink(parent, filepath.Join(dir, "parent")); err != nil {
		t.Fatal(err)
	}
	r := startServer(t, dir)
	r.send(3, reg)
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "pages in the parent", reg.mem[:16*pageSize], old[:16*pageSize])
	equalPages(t, "pages in the image", reg.mem[16*pageSize:], cur[16*pageSize:])
}

// TestServeRefusesTruncatedImage: a pages image shorter than its pagemap
// says is refused as the restore hands over the process, with a clear
// error, and nothing is copied into it; so it is when loaded ahead.
func TestServeRefusesTruncatedImage(t *testing.T) {
	for _, ahead := range []bool{true, false} {
		t.Run(fmt.Sprintf("ahead=%v", ahead), func(t *testing.T) { testServeRefusesTruncatedImage(t, ahead) })
	}
}

func testServeRefusesTruncatedImage(t *testing.T, ahead bool) {
	const pages = 8
	reg := newRegion(t, pages)
	dir := t.TempDir()
	writeImages(t, dir, 1, 1, reg.addr, pages, []ent{{0, pages, peLazy | pePresent}}, randomPages(t, pages))
	if err := os.Truncate(filepath.Join(dir, "pages-1.img"), 5*pageSize); err != nil {
		t.Fatal(err)
	}
	if !ahead {
		if err := os.Remove(filepath.Join(dir, "pstree.img")); err != nil {
			t.Fatal(err)
		}
	}
	r := startServer(t, dir)
	r.send(1, reg)
	// The server may have hung up already.
	_, _ = r.conn.Write(binary.NativeEndian.AppendUint32(nil, restoreFinished))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.srv.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "pages-1.img: bad image: truncated: 20480 bytes, its pagemap has 32768") {
		t.Fatalf("server: %v", err)
	}
	if in := residentPages(t, reg.mem); in != 0 {
		t.Fatalf("%d pages copied from a bad image", in)
	}
}

// TestReadPstreeRefusesBadImages: a malformed pstree.img is refused with
// what is wrong (the server then loads each image as its process is
// handed over, TestServe).
func TestReadPstreeRefusesBadImages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
		want  string
	}{
		{"twice", func(t *testing.T, dir string) { writePstree(t, dir, 3, 4, 3) }, "entry 2: pid 3"},
		{"zero", func(t *testing.T, dir string) { writePstree(t, dir, 0) }, "entry 0: pid 0"},
		{"past PID_MAX_LIMIT", func(t *testing.T, dir string) { writePstree(t, dir, maxPID+1) }, "pid 4194305"},
		{"bad magic", func(t *testing.T, dir string) {
			writeImage(t, filepath.Join(dir, "pstree.img"), criuimg.MMMagic, &pstree.PstreeEntry{Pid: proto.Uint32(1)})
		}, "not an image of magic 0x50273030"},
		{"not an entry", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "pstree.img"), binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(
				binary.LittleEndian.AppendUint32(nil, criuimg.CommonMagic), pstreeMagic), 1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "past the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.write(t, dir)
			pids, err := readPstree(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("pids %v, error %v: want one saying %q", pids, err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	writePstree(t, dir, 5, 9)
	if pids, err := readPstree(dir); err != nil || !slices.Equal(pids, []int{5, 9}) {
		t.Fatalf("pids %v, error %v", pids, err)
	}
}

// TestLoadTaskRefusesBadImages: each malformed image is refused with
// what is wrong, before anything is served.
func TestLoadTaskRefusesBadImages(t *testing.T) {
	const base, pages = 0x7f0000000000, 8
	data := make([]byte, (pages+1)*pageSize)
	lazy := uint32(peLazy | pePresent)
	for _, tc := range []struct {
		name string
		ents []ent
		edit func(t *testing.T, dir string)
		want string
	}{
		{"overlap", []ent{{0, 4, lazy}, {3, 2, lazy}}, nil, "overlaps or precedes"},
		{"zero pages", []ent{{0, 0, lazy}}, nil, "0 pages at"},
		{"bad flags", []ent{{0, 1, 1 << 5}}, nil, "flags 0x20"},
		{"present and in parent", []ent{{0, 1, pePresent | peParent}}, nil, "flags 0x5"},
		{"lazy without data", []ent{{0, 1, peLazy}}, nil, "has no data"},
		{"outside the mapping", []ent{{pages, 1, lazy}}, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), make([]byte, pageSize), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "outside every mapping"},
		{"bad magic", []ent{{0, 1, lazy}}, func(t *testing.T, dir string) {
			writeImage(t, filepath.Join(dir, "pagemap-1.img"), criuimg.MMMagic, &pagemap.PagemapHead{PagesId: proto.Uint32(1)})
		}, "not an image of magic 0x56084025"},
		{"message past the end", []ent{{0, 1, lazy}}, func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "pagemap-1.img"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, _ = f.Write([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2})
		}, "past the end"},
		{"overflow", []ent{{0, 1, lazy}}, func(t *testing.T, dir string) {
			writeImage(t, filepath.Join(dir, "pagemap-1.img"), criuimg.PagemapMagic, &pagemap.PagemapHead{PagesId: proto.Uint32(1)},
				&pagemap.PagemapEntry{Vaddr: proto.Uint64(1<<64 - pageSize), NrPages: proto.Uint32(2), Flags: proto.Uint32(lazy)})
		}, "2 pages at 0xfffffffffffff000"},
		{"bad mapping", []ent{{0, 1, lazy}}, func(t *testing.T, dir string) {
			s, e := uint64(base+pageSize), uint64(base)
			writeImage(t, filepath.Join(dir, "mm-1.img"), criuimg.MMMagic, &mm.MmEntry{Vmas: []*vmaimg.VmaEntry{{Start: &s, End: &e}}})
		}, "mapping 0"},
		{"no parent", []ent{{0, 1, peLazy | peParent}}, nil, "parent/pagemap-1.img: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeImages(t, dir, 1, 1, base, pages, tc.ents, data)
			if tc.edit != nil {
				tc.edit(t, dir)
			}
			img, err := loadTask(dir, 1)
			if err == nil {
				img.close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// BenchmarkServe streams a region of 256 MiB, every page lazy, from a
// pages image on disk read after dropping the page cache; it reports the
// transfer's MiB/s from the restore's end to the server's exit, and logs
// the server's own account.
func BenchmarkServe(b *testing.B) {
	const pages = 256 << 20 / pageSize
	for b.Loop() {
		b.StopTimer()
		reg := newRegion(b, pages)
		data := make([]byte, pages*pageSize)
		for i := range pages {
			binary.LittleEndian.PutUint64(data[i*pageSize:], uint64(i))
		}
		dir := b.TempDir()
		writeImages(b, dir, 1, 1, reg.addr, pages, []ent{{0, pages, peLazy | pePresent}}, data)
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
			b.Fatal(err)
		}
		r := startServer(b, dir)
		r.send(1, reg)
		b.StartTimer()
		start := time.Now()
		if err := r.finish(); err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		b.StopTimer()
		log, _ := os.ReadFile(filepath.Join(dir, LogName))
		b.Logf("%.0f MiB/s: %s", 256/el.Seconds(), bytes.TrimSpace(log))
		b.ReportMetric(256/el.Seconds(), "MiB/s")
		b.StartTimer()
	}
}

// TestServeEndsWhenStarterGoesFirst: a starter that goes away (here: says
// running) before any restore connected leaves the server nothing to
// serve, and it exits at once instead of listening until acceptTimeout.
func TestServeEndsWhenStarterGoesFirst(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := Start(Options{Path: exe, Dir: dir, Env: []string{"GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.Running()
	ctx, cancel := context.WithTimeout(context.Background(), acceptTimeout/2)
	defer cancel()
	err = srv.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "before a restore connected") {
		t.Fatalf("server without a restore: %v", err)
	}
}
