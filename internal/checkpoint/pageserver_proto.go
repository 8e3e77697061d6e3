package checkpoint

import (
	"encoding/binary"
	"fmt"
)

// CRIU's page-server wire format (criu/page-xfer.c, CRIU 4.x). Every
// command is a little-endian page_server_iov: 24 bytes up to CRIU 4.1
// (u32 cmd, u32 nr_pages, u64 vaddr, u64 dst_id), 32 from CRIU 4.2, where
// nr_pages became a u64 (commit 7e0da4d97 "pagemap: use unsigned long for
// page counts": u32 cmd, 4 bytes of padding, u64 nr_pages, u64 vaddr, u64
// dst_id). The first command tells which (psiLayoutOf). PS_IOV_ADD* commands
// with present pages are followed by nr_pages raw pages. The dumping side
// is the client: it sends OPEN2 once per pagemap (and reads a 1-byte
// has-parent answer), ADD_F per run of pages (the pagemap entry flags in
// the top 16 bits of cmd), and CLOSE at the end (read back: an int32
// status); then it closes the connection.
const (
	pageSize = 4096
	psiSize  = 24 // CRIU 4.0 and 4.1
	psiSize2 = 32 // CRIU 4.2 and later

	psIovAdd        = 1 // legacy: present pages
	psIovHole       = 2 // legacy: pages in the parent image
	psIovOpen       = 3 // legacy: open without an answer
	psIovOpen2      = 4 // open a pagemap; answer: 1 byte has-parent
	psIovParent     = 5 // does the parent have this pagemap; answer: int32
	psIovAddF       = 6 // pagemap entry with flags (cmd >> 16)
	psIovGet        = 7 // lazy-pages request: not served here
	psIovClose      = 0x1023
	psIovForceClose = 0x1024

	psCmdBits  = 16
	psTypeBits = 8
	psTypePID  = 1 // dst_id type of a task's pagemap-<pid>.img
	psTypeShm  = 2 // dst_id type of pagemap-shmem-<shmid>.img

	// Pagemap entry flags (criu/include/pagemap.h).
	peParent  = 1 << 0
	peLazy    = 1 << 1
	pePresent = 1 << 2
)

// psi is one page_server_iov.
type psi struct {
	cmd     uint32
	nrPages uint32
	vaddr   uint64
	dstID   uint64
}

// decodePSI decodes a page_server_iov of len(b) bytes (psiSize or psiSize2).
func decodePSI(b []byte) (psi, error) {
	le := binary.LittleEndian
	if len(b) == psiSize {
		return psi{cmd: le.Uint32(b[0:]), nrPages: le.Uint32(b[4:]), vaddr: le.Uint64(b[8:]), dstID: le.Uint64(b[16:])}, nil
	}
	n := le.Uint64(b[8:])
	if n > 1<<32-1 {
		return psi{}, fmt.Errorf("page-server command for %d pages: more than one pagemap entry holds", n)
	}
	return psi{cmd: le.Uint32(b[0:]), nrPages: uint32(n), vaddr: le.Uint64(b[16:]), dstID: le.Uint64(b[24:])}, nil
}

// psiLayoutOf is the size of the page_server_iovs of a session whose first
// command's first psiSize bytes are b. CRIU's first command names a pagemap
// (OPEN2, or PARENT when it asks about a parent image), so in the 4.1
// layout bytes 16..23 are its dst_id, never 0 (its low byte is the image
// type, 1 or 2); in the 4.2 layout they are its vaddr, always 0.
func psiLayoutOf(b []byte) int {
	if binary.LittleEndian.Uint64(b[16:]) == 0 {
		return psiSize2
	}
	return psiSize
}

func (p psi) command() uint32 { return p.cmd & (1<<psCmdBits - 1) }

// entryFlags are the pagemap entry flags an ADD-type command carries.
func (p psi) entryFlags() uint32 {
	switch p.command() {
	case psIovAdd:
		return pePresent
	case psIovHole:
		return peParent
	}
	return p.cmd >> psCmdBits
}

// pagemapKey names one pagemap image: a task's (by its pid in the image)
// or a shared memory segment's.
type pagemapKey struct {
	shmem bool
	id    uint64
}

// keyOf decodes a dst_id. CRIU 4 sends only the two current type numbers.
func keyOf(dstID uint64) (pagemapKey, error) {
	switch dstID & (1<<psTypeBits - 1) {
	case psTypePID:
		return pagemapKey{id: dstID >> psTypeBits}, nil
	case psTypeShm:
		return pagemapKey{shmem: true, id: dstID >> psTypeBits}, nil
	}
	return pagemapKey{}, fmt.Errorf("unknown pagemap type in dst_id %#x", dstID)
}

func (k pagemapKey) dstID() uint64 {
	t := uint64(psTypePID)
	if k.shmem {
		t = psTypeShm
	}
	return k.id<<psTypeBits | t
}

// fileName is the pagemap image's name in the images directory.
func (k pagemapKey) fileName() string {
	if k.shmem {
		return fmt.Sprintf("pagemap-shmem-%d.img", k.id)
	}
	return fmt.Sprintf("pagemap-%d.img", k.id)
}

func (k pagemapKey) String() string { return k.fileName() }
