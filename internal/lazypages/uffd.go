package lazypages

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The userfaultfd ABI (include/uapi/linux/userfaultfd.h). The restore
// opens the fd and negotiates its API (uffd_open in criu/uffd.c, with the
// features of NEED_UFFD_API_FEATURES: EVENT_FORK, EVENT_REMAP,
// EVENT_UNMAP, EVENT_REMOVE) and its restorer registers each lazy mapping
// in missing mode (criu/pie/restorer.c); the server only reads the
// events and resolves them.
const (
	uffdioUnregister = 0x8010aa01 // _IOR(0xAA, 0x01, struct uffdio_range)
	uffdioCopy       = 0xc028aa03 // _IOWR(0xAA, 0x03, struct uffdio_copy)
	uffdioZeropage   = 0xc020aa04 // _IOWR(0xAA, 0x04, struct uffdio_zeropage)

	// Events of struct uffd_msg.
	eventPagefault = 0x12
	eventFork      = 0x13
	eventRemap     = 0x14
	eventRemove    = 0x15
	eventUnmap     = 0x16

	msgSize = 32 // sizeof(struct uffd_msg)
)

// uffdMsg is a decoded struct uffd_msg: u8 event, 7 bytes reserved, then
// a union of 24 bytes. a, b and c are its first three u64s: pagefault
// {flags, address}, fork {u32 ufd}, remap {from, to, len}, remove and
// unmap {start, end}.
type uffdMsg struct {
	event   uint8
	a, b, c uint64
}

func decodeMsg(p []byte) uffdMsg {
	le := binary.LittleEndian
	return uffdMsg{event: p[0], a: le.Uint64(p[8:]), b: le.Uint64(p[16:]), c: le.Uint64(p[24:])}
}

// uffdioCopyArg is struct uffdio_copy; copy is the kernel's answer: the
// bytes copied, or a negative errno.
type uffdioCopyArg struct {
	dst, src, len, mode uint64
	copy                int64
}

// uffdioZeropageArg is struct uffdio_zeropage.
type uffdioZeropageArg struct {
	start, len, mode uint64
	zeropage         int64
}

// copyPages fills [dst, dst+len(src)) of the fd's process with src and
// wakes the threads waiting on it. It returns the bytes copied before an
// error (a page already there, EEXIST; a mapping change under way,
// EAGAIN; no registered mapping there, ENOENT; the process gone, ESRCH).
func copyPages(fd int, dst uint64, src []byte) (uint64, error) {
	arg := uffdioCopyArg{dst: dst, src: uint64(uintptr(unsafe.Pointer(&src[0]))), len: uint64(len(src))}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uffdioCopy, uintptr(unsafe.Pointer(&arg)))
	if e == 0 {
		return uint64(len(src)), nil
	}
	if arg.copy > 0 {
		return uint64(arg.copy), e
	}
	return 0, e
}

// zeroPages maps the zero page at [start, start+n) and wakes the waiters.
func zeroPages(fd int, start, n uint64) error {
	arg := uffdioZeropageArg{start: start, len: n}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uffdioZeropage, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return e
	}
	return nil
}

// unregister stops faults in [start, start+n) from coming to the fd.
func unregister(fd int, start, n uint64) error {
	r := [2]uint64{start, n}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uffdioUnregister, uintptr(unsafe.Pointer(&r))); e != 0 {
		return e
	}
	return nil
}
