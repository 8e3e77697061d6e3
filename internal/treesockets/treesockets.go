// Package treesockets gives the sockets of a tree CRIU restored back to
// the tree's owner before the tree runs.
//
// CRIU makes every socket of a restored tree while the restored processes
// still hold root's credentials, and binds network sockets with
// SO_REUSEPORT on (criu/sk-inet.c, open_inet_sk; the tree's own option is
// set back after the bind). The sockets came back root's: their owner
// (sk_uid, what /proc/net and sock_diag report, what a SO_REUSEPORT group
// and `ip rule uidrange` match on) was uid 0, so a user's restored
// listener joined a SO_REUSEPORT group of root's on its port and took its
// connections, and a socket kept through a thaw and bound later could join
// one at any time (a red-team pass, H2, 2026-11-29). Own gives each socket
// to the owner (fchown of a socket sets its sk_uid: net/socket.c,
// sockfs_setattr) and refuses a tree whose listening or bound network
// socket shares its port with a socket outside it.
package treesockets

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrShared: a network socket of the restored tree shares its port with
// one outside the tree.
var ErrShared = errors.New("shares its port with a socket outside the tree")

// maxTableLine bounds one line of /proc/net/{tcp,udp}[6] (about 150 bytes).
const maxTableLine = 4096

// Own gives every socket the processes pids hold to uid and gid and fails
// with ErrShared where one of the tree's TCP listeners or bound UDP
// sockets shares its port with a socket of another's (restored bound, it
// may already have taken that one's traffic: the tree must not run).
func Own(pids []int, uid, gid uint32) error {
	inodes := map[uint64]bool{}
	for _, pid := range pids {
		if err := ownSockets(pid, uid, gid, inodes); err != nil {
			return fmt.Errorf("sockets of pid %d: %w", pid, err)
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	return shared(inodes)
}

// ownSockets fchowns each socket pid holds that is not in seen yet, through
// a copy of its descriptor (pidfd_getfd), adding it to seen.
func ownSockets(pid int, uid, gid uint32, seen map[uint64]bool) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(512)
		for _, name := range names {
			if err := ownOne(pidfd, dir, name, uid, gid, seen); err != nil {
				return err
			}
		}
		if err != nil {
			return nil // io.EOF: every descriptor seen
		}
	}
}

func ownOne(pidfd int, dir, name string, uid, gid uint32, seen map[uint64]bool) error {
	target, err := os.Readlink(dir + "/" + name)
	if err != nil {
		return nil // closed meanwhile
	}
	ino, ok := socketInode(target)
	if !ok || seen[ino] {
		return nil
	}
	n, err := strconv.Atoi(name)
	if err != nil {
		return nil
	}
	fd, err := unix.PidfdGetfd(pidfd, n, 0)
	if err != nil {
		return fmt.Errorf("fd/%d: %w", n, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Ino != ino {
		return nil // another file by now: the tree has not run, so none
	}
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return fmt.Errorf("fd/%d: %w", n, err)
	}
	seen[ino] = true
	return nil
}

// socketInode parses a descriptor's link, "socket:[12345]".
func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return ino, err == nil
}

// Bound is a listening TCP or bound UDP (or UDP-Lite) socket's port.
type Bound struct {
	Proto string     // "tcp", "udp" or "udplite", as /proc/net names its tables
	Addr  netip.Addr // unmapped: an IPv4-mapped IPv6 address is the IPv4 one
	Port  uint16
}

// overlaps reports whether b and o would share a port: the same protocol
// and port, on the same address or either on any.
func (b Bound) overlaps(o Bound) bool {
	return b.Proto == o.Proto && b.Port == o.Port && (b.Addr == o.Addr || b.Addr.IsUnspecified() || o.Addr.IsUnspecified())
}

// tables are the /proc/net tables of bound sockets and their protocols.
var tables = map[string]string{"tcp": "tcp", "tcp6": "tcp", "udp": "udp", "udp6": "udp", "udplite": "udplite", "udplite6": "udplite"}

// Taken fails with ErrShared where a port of binds (a tree's, before its
// restore binds them) is held by a socket of the host's now.
func Taken(binds []Bound) error {
	if len(binds) == 0 {
		return nil
	}
	return eachTable(func(x Bound, inode uint64) error {
		for _, b := range binds {
			if b.overlaps(x) {
				return fmt.Errorf("a %s socket of the tree bound to port %d %w (socket %d): a restore would bind it as root's, where it takes that socket's traffic", b.Proto, b.Port, ErrShared, inode)
			}
		}
		return nil
	})
}

// shared fails with ErrShared where a socket of tree (by inode) and one
// outside it share a port.
func shared(tree map[uint64]bool) error {
	var ours []Bound
	type other struct {
		Bound
		inode uint64
	}
	var others []other
	if err := eachTable(func(b Bound, inode uint64) error {
		if tree[inode] {
			ours = append(ours, b)
		} else {
			others = append(others, other{b, inode})
		}
		return nil
	}); err != nil {
		return err
	}
	for _, o := range ours {
		for _, x := range others {
			if o.overlaps(x.Bound) {
				return fmt.Errorf("a %s socket of the tree bound to port %d %w (socket %d): a restore binds it as root's, where it takes that socket's traffic", o.Proto, o.Port, ErrShared, x.inode)
			}
		}
	}
	return nil
}

// eachTable calls fn with each socket of the host's tables that listens
// (TCP's state 0A) or is bound to a port (UDP's, UDP-Lite's), and its
// inode, until fn fails.
func eachTable(fn func(Bound, uint64) error) error {
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		if err := eachBound("/proc/self/net/"+name, tables[name], fn); err != nil {
			return err
		}
	}
	return nil
}

func eachBound(path, proto string, fn func(Bound, uint64) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no IPv6, no UDP-Lite
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), maxTableLine)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || proto == "tcp" && fields[3] != "0A" {
			continue
		}
		addrHex, portHex, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		addr, ok := tableAddr(addrHex)
		port, err1 := strconv.ParseUint(portHex, 16, 16)
		inode, err2 := strconv.ParseUint(fields[9], 10, 64)
		if !ok || err1 != nil || err2 != nil || port == 0 || inode == 0 {
			continue
		}
		if err := fn(Bound{Proto: proto, Addr: addr, Port: uint16(port)}, inode); err != nil {
			return err
		}
	}
	return sc.Err()
}

// tableAddr parses a /proc/net table's address: its 32-bit words in
// hexadecimal as the host reads them (the words of the address in network
// order), 8 digits for IPv4, 32 for IPv6.
func tableAddr(hex string) (netip.Addr, bool) {
	if len(hex) != 8 && len(hex) != 32 {
		return netip.Addr{}, false
	}
	words := make([]uint32, len(hex)/8)
	for i := range words {
		w, err := strconv.ParseUint(hex[i*8:i*8+8], 16, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		words[i] = uint32(w)
	}
	return WordsAddr(words)
}

// WordsAddr is the address whose network-order 32-bit words a host read
// as words (as /proc/net prints them and CRIU images them): one for IPv4,
// four for IPv6; unmapped.
func WordsAddr(words []uint32) (netip.Addr, bool) {
	b := make([]byte, 0, 16)
	for _, w := range words {
		b = binary.NativeEndian.AppendUint32(b, w)
	}
	a, ok := netip.AddrFromSlice(b)
	return a.Unmap(), ok
}
