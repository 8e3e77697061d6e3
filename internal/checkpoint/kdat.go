package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OwnersKdat is where the CRIU workers run as a tree's owner keep CRIU's
// probe of the kernel, criu.kdat. Every CRIU operation probes the kernel
// first (kerndat_init, criu/kerndat.c: tens of ms, `iptables -L` among it)
// unless it finds that cache. A root worker keeps it in /run, where /run is
// a tmpfs; a worker with --unprivileged, as every owner's is, keeps it in
// $XDG_RUNTIME_DIR, and without that variable probes on every operation.
// CRIU saves the cache only on a tmpfs, so that a reboot clears it.
//
// The owners' workers hold this daemon's capabilities, so the file they
// read must be out of the owners' own reach: the directory is root's and
// only root may enter it. A worker enters it by CAP_DAC_OVERRIDE; the
// owner's processes, which hold no capability, cannot, and cannot reach
// the worker's descriptors either (a worker that gained capabilities at
// exec is not dumpable). Its content is the host's, as /run/criu.kdat is,
// so one directory serves every owner and every daemon on the host.
const OwnersKdat = "/dev/shm/gpusched-criu-kdat"

// kdatDir makes dir, or takes it as it is, for the owners' kdat cache. It
// fails, and the owners' workers then probe every time, unless dir is a
// directory of root's that only root may enter, on a tmpfs; a directory
// someone else made first is never used.
func kdatDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o7777 != 0o700 {
		return fmt.Errorf("%s is not a directory of root's that only root may enter (mode %o, uid %d)", dir, st.Mode&0o7777, st.Uid)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s is not on a tmpfs, where alone CRIU keeps its cache", dir)
	}
	return nil
}
