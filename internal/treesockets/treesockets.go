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
	"errors"
	"fmt"
	"os"
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

// A bound is a listening TCP or bound UDP socket of the host's tables.
type bound struct {
	proto string // "tcp" or "udp"
	addr  string // hex, as the table writes it; all zeros for any address
	port  uint64
	inode uint64
}

// shared fails with ErrShared where a socket of tree (by inode) and one
// outside it are bound to the same port of the same protocol, on the same
// address or one of them on any.
func shared(tree map[uint64]bool) error {
	var ours, others []bound
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6"} {
		err := eachBound("/proc/self/net/"+table, strings.TrimSuffix(table, "6"), func(b bound) {
			if tree[b.inode] {
				ours = append(ours, b)
			} else {
				others = append(others, b)
			}
		})
		if err != nil {
			return err
		}
	}
	for _, o := range ours {
		for _, x := range others {
			if o.proto == x.proto && o.port == x.port && (o.addr == x.addr || anyAddr(o.addr) || anyAddr(x.addr)) {
				return fmt.Errorf("a %s socket of the tree bound to port %d %w (socket %d): a restore binds it as root's, where it takes that socket's traffic", o.proto, o.port, ErrShared, x.inode)
			}
		}
	}
	return nil
}

func anyAddr(hex string) bool { return strings.Trim(hex, "0") == "" }

// eachBound calls fn for each socket of the table at path that listens (a
// TCP table's state 0A) or is bound to a port (a UDP table's).
func eachBound(path, proto string, fn func(bound)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no IPv6
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
		if len(fields) < 10 {
			continue
		}
		addr, portHex, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		port, err1 := strconv.ParseUint(portHex, 16, 16)
		inode, err2 := strconv.ParseUint(fields[9], 10, 64)
		if err1 != nil || err2 != nil || port == 0 || inode == 0 {
			continue
		}
		if proto == "tcp" && fields[3] != "0A" {
			continue
		}
		fn(bound{proto: proto, addr: addr, port: port, inode: inode})
	}
	return sc.Err()
}
