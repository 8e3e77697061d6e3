package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	remap "github.com/checkpoint-restore/go-criu/v7/crit/images/remap-file-path"
	"golang.org/x/sys/unix"
)

// A ghost is a file a tree held after it was deleted: CRIU copies it into
// the image and, on restore, as root, makes it again at its old path plus
// ".cr.N.ghost", links it to the old path, opens it there, unlinks the link
// and, at the end, the ghost (criu/files-reg.c: create_ghost, rfi_remap,
// open_path, try_clean_remaps), each step resolving the path anew through
// the directories the tree's owner controls. An owner who swapped one of
// them for a symlink to a directory of root's, holding CRIU's open with a
// lease on the ghost (theirs), had root unlink the file of their choosing
// there, or leave their own file at a name of their choosing (red team
// H1). stageGhosts moves every ghost of a restore to a directory only
// root can enter, on the ghost's own mount: CRIU's steps then act there.

// remapImage maps files to how CRIU makes them again (criu/files-reg.c,
// dump_ghost_remap; RemapFilePathEntry).
const remapImage = "remap-fpath.img"

// legacyGhostBit marks a ghost's remap_id in images without remap_type
// (REMAP_GHOST, criu/include/image.h).
const legacyGhostBit = 1 << 31

// ErrNoGhostStage: a ghost's mount has no directory only root may change.
var ErrNoGhostStage = errors.New("the tree holds a deleted file on a mount where no directory only root can change holds the images or is the mount's top: a restore would make it again by its old path, as root")

// ghost is one file entry CRIU makes again from a ghost image.
type ghost struct {
	reg   *fdinfo.FileEntry
	mount *mnt.MntEntry
}

// ghostsOf lists the ghosts of the images in dir with the decoded files
// image they are entries of (nil without ghosts).
func ghostsOf(dir string) ([]ghost, *crit.CriuImage, error) {
	img, err := decodeImage(filepath.Join(dir, remapImage), &remap.RemapFilePathEntry{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	ids := map[uint32]bool{}
	for _, e := range img.Entries {
		r, ok := e.Message.(*remap.RemapFilePathEntry)
		if !ok {
			continue
		}
		if r.RemapType != nil && r.GetRemapType() == remap.RemapType_GHOST || r.RemapType == nil && r.GetRemapId()&legacyGhostBit != 0 {
			ids[r.GetOrigId()] = true
		}
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	files, err := decodeImage(filepath.Join(dir, filesImage), &fdinfo.FileEntry{})
	if err != nil {
		return nil, nil, err
	}
	mountsPath, err := rootMountsImage(dir)
	if err != nil {
		return nil, nil, err
	}
	mounts := map[int32]*mnt.MntEntry{}
	if mountsPath != "" {
		mimg, err := decodeImage(mountsPath, &mnt.MntEntry{})
		if err != nil {
			return nil, nil, err
		}
		for _, e := range mimg.Entries {
			if m, ok := e.Message.(*mnt.MntEntry); ok {
				mounts[int32(m.GetMntId())] = m
			}
		}
	}
	var out []ghost
	for _, e := range files.Entries {
		fe, ok := e.Message.(*fdinfo.FileEntry)
		if !ok || fe.GetType() != fdinfo.FdTypes_REG || fe.Reg == nil || !ids[fe.Reg.GetId()] {
			continue
		}
		m := mounts[fe.Reg.GetMntId()]
		if m == nil {
			return nil, nil, fmt.Errorf("%w: %s is on mount %d, not in the image", ErrNoGhostStage, fe.Reg.GetName(), fe.Reg.GetMntId())
		}
		out = append(out, ghost{reg: fe, mount: m})
	}
	return out, files, nil
}

// ghostStages says, for each mount holding a ghost, in which directory only
// root may change a stage for it can be made: the images directory where
// it is on that mount, else the mount's top (itself and every directory
// above it root's, none writable by others unless sticky).
func ghostStages(dir string, ghosts []ghost) (map[uint32]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	parents := map[uint32]string{}
	for _, g := range ghosts {
		id := g.mount.GetMntId()
		if _, ok := parents[id]; ok {
			continue
		}
		mp := filepath.Clean("/" + strings.TrimPrefix(g.mount.GetMountpoint(), "."))
		switch {
		case onMount(abs, mp, g.mount, ghosts) && rootOnly(abs):
			parents[id] = abs
		case rootOnly(mp) && sameDevice(mp, g.mount):
			parents[id] = mp
		default:
			return nil, fmt.Errorf("%w: %s (mount %s)", ErrNoGhostStage, g.reg.Reg.GetName(), mp)
		}
	}
	return parents, nil
}

// onMount reports whether path lies on the mount m at mp and no other
// mount of a ghost lies between (a mount below mp holds it instead), on
// m's device.
func onMount(path, mp string, m *mnt.MntEntry, ghosts []ghost) bool {
	if path != mp && !strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
		return false
	}
	for _, g := range ghosts {
		other := filepath.Clean("/" + strings.TrimPrefix(g.mount.GetMountpoint(), "."))
		if len(other) > len(mp) && (path == other || strings.HasPrefix(path, other+"/")) {
			return false
		}
	}
	return sameDevice(path, m)
}

// sameDevice reports whether path is on m's device (CRIU's root_dev is the
// kernel's: major << 20 | minor).
func sameDevice(path string, m *mnt.MntEntry) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return uint32(unix.Major(st.Dev))<<20|uint32(unix.Minor(st.Dev)) == m.GetRootDev()
}

// rootOnly reports whether no one but root can rename, replace or remove
// path or any directory above it: each is a directory (no symlink on the
// way) owned by root and writable by no one else, or sticky.
func rootOnly(path string) bool {
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 {
			return false
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

// stageGhosts rewrites dir's files image so that CRIU makes each ghost
// again in a fresh directory of root's (0700) on its mount, named by its
// file id, and returns what undoes it once the restore is over: the image
// as dumped back and the directories gone (unstageGhosts; the image as
// dumped and the stages' list are kept beside it meanwhile, so that the
// next restore undoes what one the daemon died in left).
// A restored process sees such a file under that name, deleted.
func stageGhosts(dir string) (undo func(), err error) {
	ghosts, files, err := ghostsOf(dir)
	if err != nil || len(ghosts) == 0 {
		return func() {}, err
	}
	parents, err := ghostStages(dir, ghosts)
	if err != nil {
		return nil, err
	}
	undo = func() { _ = unstageGhosts(dir) }
	stages := map[uint32]string{}
	var made []string
	for id, parent := range parents {
		s, err := makeStage(dir, parent, made)
		if s != "" {
			made = append(made, s)
			stages[id] = s
		}
		if err != nil {
			undo()
			return nil, err
		}
	}
	for _, g := range ghosts {
		g.reg.Reg.Name = ptr(filepath.Join(stages[g.mount.GetMntId()], strconv.FormatUint(uint64(g.reg.Reg.GetId()), 10)))
	}
	path := filepath.Join(dir, filesImage)
	if err := os.Link(path, path+dumpedMountsSuffix); err != nil {
		undo()
		return nil, fmt.Errorf("files image: %w", err)
	}
	if err := replaceImage(path, files); err != nil {
		undo()
		return nil, err
	}
	return undo, nil
}

// stagesFile lists, in the images directory, the stages a restore made
// (one path a line), for the next restore to remove what one the daemon
// died in left.
const stagesFile = "gpusched-ghost-stages"

// stagePrefix begins the name of every stage.
const stagePrefix = ".gpusched-ghosts-"

// unstageGhosts puts dir's files image as dumped back and removes the
// stages of its ghosts, where a restore staged them.
func unstageGhosts(dir string) error {
	path := filepath.Join(dir, filesImage)
	err := os.Rename(path+dumpedMountsSuffix, path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	b, rerr := os.ReadFile(filepath.Join(dir, stagesFile))
	if errors.Is(rerr, fs.ErrNotExist) {
		return err
	}
	for _, s := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(filepath.Base(s), stagePrefix) && filepath.IsAbs(s) {
			_ = os.RemoveAll(s)
		}
	}
	return errors.Join(err, rerr, os.Remove(filepath.Join(dir, stagesFile)))
}

// makeStage makes a fresh directory of root's, 0700, in parent, listing
// it after those made before in dir's stagesFile first.
func makeStage(dir, parent string, made []string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	s := filepath.Join(parent, stagePrefix+hex.EncodeToString(b))
	list := strings.Join(append(made, s), "\n")
	if err := os.WriteFile(filepath.Join(dir, stagesFile), []byte(list), 0o600); err != nil {
		return "", fmt.Errorf("ghost stage: %w", err)
	}
	if err := os.Mkdir(s, 0o700); err != nil {
		return "", fmt.Errorf("ghost stage: %w", err)
	}
	return s, nil
}
