package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/sk-packet"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/treesockets"
)

// The image of a dump CheckImages reads beside filesImage: the packets queued in a tree's
// sockets, with the descriptors in flight among them (criu/sk-queue.c,
// dump_scm_rights). Unix sockets are among filesImage's files
// (criu/sk-unix.c, write_unix_entry).
const queuesImage = "sk-queues.img" // and filesImage

var (
	// ErrRightsInFlight: the images queue descriptors in a socket.
	ErrRightsInFlight = errors.New("the tree has descriptors in flight in a socket (SCM_RIGHTS), which a restore would reopen by their paths, as root, where nothing can check them: receive or close them first")
	// ErrSocketPath: a user's tree holds a Unix socket with a name in the
	// file system.
	ErrSocketPath = errors.New("the tree holds a Unix socket bound to a path in the file system, which a restore would unlink and bind again by that path, as root, before anything can check it: use an abstract socket (a name starting with a NUL byte) or close it first")
	// ErrPeerOutside: a Unix socket of the tree is connected to one CRIU
	// did not image.
	ErrPeerOutside = errors.New("the tree holds a Unix socket connected to one outside it (a connection a listener outside the tree has not yet accepted), which no restore can connect again: close it first")
)

// CheckImages fails where a restore of the images in dir would act, as
// root, on paths the tree chose, past any check of the daemon's, or can
// never succeed. CRIU restores as root and, before the tree runs:
//   - reopens by path the files of descriptors in flight in a socket
//     (SCM_RIGHTS), which the process receives once it runs;
//   - for a socket bound to a path, unlinks whatever socket is at that path
//     now, binds the tree's there and chowns it to the tree's owner
//     (criu/sk-unix.c: unlink_sk, bind_unix_sk, restore_file_perms), and
//     for one bound and deleted since, makes its directories, moves aside
//     what is at the path and back (bind_on_deleted): a user who pointed
//     the path's directory elsewhere took root's socket there. Refused
//     where user is set (the tree is not root's);
//   - cannot connect a socket to a peer it did not image: the restore fails
//     ("Peer %d unresolved", criu/sk-unix.c), so the dump would leave a
//     process no thaw brings back;
//   - makes a deleted file it holds again by its path, unless a directory
//     only root may change can stage it on its mount (ghostStages).
func CheckImages(dir string, user bool) error {
	if err := rightsInFlight(dir); err != nil {
		return err
	}
	if err := unixSockets(dir, user); err != nil {
		return err
	}
	ghosts, _, err := ghostsOf(dir)
	if err == nil && len(ghosts) > 0 {
		_, err = ghostStages(dir, ghosts)
	}
	return err
}

// openImage opens the image name in dir; ok is false where there is none.
func openImage(dir, name string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("images %s: %w", dir, err)
	}
	return f, true, nil
}

func rightsInFlight(dir string) error {
	f, ok, err := openImage(dir, queuesImage)
	if !ok {
		return err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, true).Decode(&sk_packet.SkPacketEntry{})
	if err != nil {
		return fmt.Errorf("images %s: %s: %w", dir, queuesImage, err)
	}
	for _, e := range img.Entries {
		p, ok := e.Message.(*sk_packet.SkPacketEntry)
		if !ok {
			continue
		}
		for _, scm := range p.GetScm() {
			if scm.GetType() == unix.SCM_RIGHTS && len(scm.GetRights()) > 0 {
				return ErrRightsInFlight
			}
		}
	}
	return nil
}

func unixSockets(dir string, user bool) error {
	f, ok, err := openImage(dir, filesImage)
	if !ok {
		return err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, false).Decode(&fdinfo.FileEntry{})
	if err != nil {
		return fmt.Errorf("images %s: %s: %w", dir, filesImage, err)
	}
	imaged := map[uint32]bool{}
	var peers []uint32
	for _, e := range img.Entries {
		fe, ok := e.Message.(*fdinfo.FileEntry)
		if !ok || fe.GetType() != fdinfo.FdTypes_UNIXSK || fe.Usk == nil {
			continue
		}
		sk := fe.Usk
		if name := sk.GetName(); user && len(name) > 0 && name[0] != 0 {
			return ErrSocketPath
		}
		imaged[sk.GetIno()] = true
		if p := sk.GetPeer(); p != 0 {
			peers = append(peers, p)
		}
	}
	for _, p := range peers {
		if !imaged[p] {
			return ErrPeerOutside
		}
	}
	return nil
}

// IP protocols whose bound sockets CRIU binds again (criu/sk-inet.c), by
// the names of their /proc/net tables.
var inetProtos = map[uint32]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp", unix.IPPROTO_UDPLITE: "udplite"}

// InetBinds lists the ports the tree imaged in dir has its network
// sockets listen on (TCP) or bound to (UDP, UDP-Lite), which its restore
// binds again as root's with SO_REUSEPORT on (criu/sk-inet.c,
// open_inet_sk).
func InetBinds(dir string) ([]treesockets.Bound, error) {
	f, ok, err := openImage(dir, filesImage)
	if !ok {
		return nil, err
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, false).Decode(&fdinfo.FileEntry{})
	if err != nil {
		return nil, fmt.Errorf("images %s: %s: %w", dir, filesImage, err)
	}
	var binds []treesockets.Bound
	for _, e := range img.Entries {
		fe, ok := e.Message.(*fdinfo.FileEntry)
		if !ok || fe.GetType() != fdinfo.FdTypes_INETSK || fe.Isk == nil {
			continue
		}
		sk := fe.Isk
		proto, ok := inetProtos[sk.GetProto()]
		if !ok || sk.GetSrcPort() == 0 || proto == "tcp" && sk.GetState() != tcpListen {
			continue
		}
		addr, ok := treesockets.WordsAddr(sk.GetSrcAddr())
		if !ok {
			return nil, fmt.Errorf("images %s: socket %d: an address of %d words", dir, sk.GetIno(), len(sk.GetSrcAddr()))
		}
		binds = append(binds, treesockets.Bound{Proto: proto, Addr: addr, Port: uint16(sk.GetSrcPort())})
	}
	return binds, nil
}

// tcpListen is TCP_LISTEN (include/net/tcp_states.h), as CRIU images a
// socket's state.
const tcpListen = 10
