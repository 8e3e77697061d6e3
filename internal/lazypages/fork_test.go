package lazypages

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestServeFork forks a process whose pages are still out (a real fork:
// the kernel gives the child a userfaultfd of its own and reports it,
// UFFD_EVENT_FORK): the child's faults are answered from the image as its
// parent's are (handle_fork in criu/uffd.c), and the server still ends
// once the child has exited and the parent has every page.
func TestServeFork(t *testing.T) {
	const pages = 64
	reg, data, dir := lazyImage(t, pages)
	r := startServer(t, dir, true)
	awaitRead(t, r.srv, pages*pageSize) // the child exits with pages read ahead for it
	r.send(1, reg)

	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	pid := forkAndDigest(reg.mem, p[1])
	unix.Close(p[1])
	if pid < 0 {
		unix.Close(p[0])
		t.Fatalf("fork: %v", unix.Errno(-pid))
	}
	got := make([]byte, digestSize)
	f := os.NewFile(uintptr(p[0]), "digest")
	defer f.Close()
	n, err := f.Read(got)
	var ws unix.WaitStatus
	if _, werr := unix.Wait4(pid, &ws, 0, nil); werr != nil {
		t.Fatal(werr)
	}
	if err != nil || n != len(got) || ws.ExitStatus() != 0 {
		t.Fatalf("child: %d bytes, %v, %v", n, err, ws)
	}
	if fold := foldDigest(data[:pages*pageSize]); string(got) != string(fold[:]) {
		t.Fatal("the child read other pages than the image's")
	}
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "parent's pages", reg.mem, data[:pages*pageSize])
}

// digestSize is the size of the child's digest of what it read: b xored
// into 32 bytes (a forked Go process may not allocate, so no hash).
const digestSize = 32

// foldDigest is the digest of b, as the forked child computes it.
func foldDigest(b []byte) [digestSize]byte {
	var d [digestSize]byte
	for i, c := range b {
		d[i%digestSize] ^= c
	}
	return d
}

// forkAndDigest forks; the child reads mem (each page faulting to the
// server through its own userfaultfd), writes its folded digest to fd and
// exits. It returns the child's pid, or -errno. The child runs only raw
// system calls and code that neither allocates nor calls the runtime (as
// syscall.forkAndExecInChild does), and no race instrumentation.
//
//go:norace
//go:nosplit
func forkAndDigest(mem []byte, fd int) int {
	var d [digestSize]byte
	pid, _, e := unix.RawSyscall(unix.SYS_FORK, 0, 0, 0)
	if e != 0 {
		return -int(e)
	}
	if pid != 0 {
		return int(pid)
	}
	for i := 0; i < len(mem); i++ {
		d[i&(digestSize-1)] ^= mem[i]
	}
	unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&d[0])), uintptr(len(d)))
	unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	return 0
}
