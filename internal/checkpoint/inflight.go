package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/sk-packet"
	"golang.org/x/sys/unix"
)

// queuesImage holds the packets queued in a tree's sockets, with the
// descriptors in flight among them (criu/sk-queue.c, dump_scm_rights).
const queuesImage = "sk-queues.img"

// ErrRightsInFlight is RightsInFlight's answer for an image with
// descriptors in flight in a socket's queue.
var ErrRightsInFlight = errors.New("the tree has descriptors in flight in a socket (SCM_RIGHTS), which a restore would reopen by their paths, as root, where nothing can check them: receive or close them first")

// RightsInFlight fails with ErrRightsInFlight where the images in dir
// queue descriptors in a socket (SCM_RIGHTS): CRIU reopens their files by
// path to queue them again, and the process receives them once it runs,
// past any check of what it holds.
func RightsInFlight(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, queuesImage), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
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
