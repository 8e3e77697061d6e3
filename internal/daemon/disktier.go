package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// criuTier is what the daemon needs from CRIU.
type criuTier interface {
	Version() string
	CUDAPlugin() bool
	Dump(ctx context.Context, o checkpoint.DumpOpts) error
	Restore(ctx context.Context, o checkpoint.RestoreOpts) (int, error)
	Lazy() bool
	Streams() bool
}

// cudaStateCarrier is implemented by GPU backends whose per-process CUDA
// state lives outside the process (simulated GPUs): a dump takes it along
// and a restore gives it to the new pid. Real CUDA state is inside the
// process memory CRIU dumps, so NVML needs nothing of the kind.
type cudaStateCarrier interface {
	CarryOut(pid int) ([]byte, error)
	CarryIn(pid int, start uint64, state []byte) error
}

var errNoCRIU = errors.New("the disk tier is off")

// openDiskTier opens the snapshot store and finds CRIU. Without CRIU the
// daemon runs with the disk tier off and says why.
func (d *Daemon) openDiskTier(ctx context.Context) error {
	snaps, incomplete, err := checkpoint.OpenSnapshots(d.cfg.Snapshots())
	if err != nil {
		return err
	}
	d.snaps, d.incomplete = snaps, incomplete
	path := d.cfg.CRIU
	switch path {
	case "none":
		d.criuErr = errors.New("--criu none")
		return nil
	case "":
		if _, err := os.Stat(config.PrivateCRIU); err == nil {
			path = config.PrivateCRIU
		}
	}
	c, err := checkpoint.NewCRIU(ctx, checkpoint.CRIUOptions{Path: path, Lazy: d.cfg.LazyRestore, Stream: d.cfg.StreamRestore})
	if err != nil {
		d.criuErr = err
		d.log.Warn("disk tier off: hibernate, thaw from disk and fork are unavailable", zap.Error(err))
		return nil
	}
	d.criu = c
	kdat, why := c.OwnersKdat()
	d.log.Info("disk tier", zap.String("criu", c.Path()), zap.String("version", c.Version()),
		zap.String("snapshots", snaps.Dir()), zap.Bool("cuda_plugin", c.CUDAPlugin()), zap.Bool("lazy_restore", c.Lazy()),
		zap.String("owners_kdat", kdat))
	if why != "" {
		d.log.Warn("CRIU probes the kernel on every dump of a non-root tree", zap.String("reason", why))
	}
	return nil
}

// needCRIU fails clearly when the disk tier is off.
func (d *Daemon) needCRIU() error {
	if d.criu != nil {
		return nil
	}
	return api.Errorf(api.CodeUnavailable, "%v: %v (scripts/install-criu.sh installs CRIU; see --criu)", errNoCRIU, d.criuErr)
}

// diskCaps are the disk tier's capabilities for hello.
func (d *Daemon) diskCaps() []string {
	if d.criu == nil {
		return nil
	}
	caps := []string{api.CapHibernate, api.CapFork, api.CapIncremental, api.CapCUDACheckpointed}
	if d.criu.CUDAPlugin() {
		caps = append(caps, api.CapCUDAPlugin)
	}
	return caps
}

// criuVersion is the CRIU version in use, "" with the disk tier off.
func (d *Daemon) criuVersion() string {
	if d.criu == nil {
		return ""
	}
	return d.criu.Version()
}

// dropSnapshots retires every snapshot of a process that ended or was
// forgotten: its images held nothing else.
func (d *Daemon) dropSnapshots(processID string) {
	if d.snaps != nil {
		d.dropOlder(processID, "")
	}
}

// dumpBytes is about what a dump of the tree under initPID writes: its
// resident memory (pages, through the page server) and the deleted files
// it holds (files), which CRIU copies into the image whole, beside the page
// server and its limit (up to ghostLimit each): a user's three deleted
// files of 250 MiB passed a hibernate at three times the user's share,
// and five filled the disk (a red-team pass, 2026-11-29).
func dumpBytes(initPID int) (pages, files uint64) {
	tree, err := procfs.ScanTree()
	if err != nil {
		return 0, 0
	}
	pids := append([]int{initPID}, tree.Descendants(initPID)...)
	return residentBytes(pids), deletedBytes(pids)
}

// dumpTotal is dumpBytes' pages and files together.
func dumpTotal(initPID int) uint64 {
	pages, files := dumpBytes(initPID)
	return pages + files
}

// deletedBytes is the size of the deleted regular files pids hold open or
// mapped, each counted once.
func deletedBytes(pids []int) uint64 {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var sum uint64
	for _, pid := range pids {
		for _, dir := range []string{"fd", "map_files"} {
			base := "/proc/" + strconv.Itoa(pid) + "/" + dir
			names, err := os.ReadDir(base)
			if err != nil {
				continue
			}
			for _, e := range names {
				// A memfd's content goes through the page server.
				if l, err := os.Readlink(base + "/" + e.Name()); err != nil || !strings.HasSuffix(l, " (deleted)") || strings.HasPrefix(l, "/memfd:") {
					continue
				}
				// No sync: a stalled FUSE server of the owner's cannot hold it.
				var st unix.Statx_t
				if unix.Statx(unix.AT_FDCWD, base+"/"+e.Name(), unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_NLINK|unix.STATX_SIZE|unix.STATX_INO, &st) != nil ||
					st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 0 {
					continue
				}
				id := inode{unix.Mkdev(st.Dev_major, st.Dev_minor), st.Ino}
				if !seen[id] {
					seen[id] = true
					sum += st.Size
				}
			}
		}
	}
	return sum
}

// residentBytes is the resident memory of pids.
func residentBytes(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		b, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/statm", procfs.MaxNumbers)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			sum += pages * uint64(os.Getpagesize())
		}
	}
	return sum
}

// reclaimTimeout bounds how long a dump over the disk budget waits for
// retired snapshots to be removed.
const reclaimTimeout = 30 * time.Second

// diskRoom checks that a dump of about est bytes of owner's tree fits
// owner's share of the snapshot disk, the disk budget and what the
// filesystem has above --disk-keep-free, once retired snapshots that count
// in them are removed.
func (d *Daemon) diskRoom(what string, owner proctable.Owner, est uint64) error {
	if share := d.userDiskShare(owner.UID); share > 0 {
		if used := d.snaps.BytesOf(owner.UID); used+est > share {
			return &limits.Exceeded{Flag: flagDiskFraction, Msg: fmt.Sprintf("%s needs about %d MiB of disk; user %s's snapshots take %d MiB of the %d MiB they may (--%s %g of %s): delete snapshots or kill hibernated processes",
				what, est>>20, owner.User, used>>20, share>>20, flagDiskFraction, d.cfg.Limits.DiskFraction, d.diskShareOf())}
		}
	}
	budget := d.cfg.DiskBudgetMiB << 20
	overBudget := func() bool { return budget > 0 && d.snaps.Bytes()+est > budget }
	overFloor := func() bool { room, _, _, ok := d.diskAboveFloor(); return ok && est+d.snaps.InFlight() > room }
	if overBudget() || overFloor() {
		ctx, cancel := context.WithTimeout(context.Background(), reclaimTimeout)
		if err := d.snaps.Reclaim(ctx); err != nil {
			d.log.Warn("retired snapshots still being removed", zap.Duration("after", reclaimTimeout))
		}
		cancel()
	}
	if overBudget() {
		return api.Errorf(api.CodeResourceExhausted, "%s needs about %d MiB of disk; snapshots take %d MiB of the %d MiB --disk-budget: delete snapshots or kill hibernated processes",
			what, est>>20, d.snaps.Bytes()>>20, budget>>20)
	}
	if room, free, floor, ok := d.diskAboveFloor(); ok && est+d.snaps.InFlight() > room {
		return api.Errorf(api.CodeResourceExhausted, "%s needs about %d MiB of disk; the filesystem of %s has %d MiB free and keeps %d MiB of it free (--%s %g): delete snapshots or kill hibernated processes",
			what, est>>20, d.cfg.Snapshots(), free>>20, floor>>20, flagDiskKeepFree, d.cfg.DiskKeepFree)
	}
	return nil
}

// --disk-keep-free: the share of the snapshot directory's filesystem no
// dump may fill, so that hibernated processes (anyone's, the daemon's own
// evictions too) never fill the disk they share with the host, root's by
// default, whatever else is on it.
const flagDiskKeepFree = "disk-keep-free"

// diskAboveFloor is what dumps may still write on the snapshot directory's
// filesystem: what is free there to unprivileged writers (root's reserve
// kept too) less --disk-keep-free of its size; with the free space and the
// floor. ok false where there is no floor or the filesystem cannot be read.
func (d *Daemon) diskAboveFloor() (room, free, floor uint64, ok bool) {
	if d.cfg.DiskKeepFree <= 0 {
		return 0, 0, 0, false
	}
	if free, floor, ok = d.snapshotDisk(); !ok {
		return 0, 0, 0, false
	}
	return free - min(free, floor), free, floor, true
}

// snapshotDisk is what is free on the snapshot directory's filesystem to
// unprivileged writers, and --disk-keep-free of its size; ok false where
// it cannot be read.
func (d *Daemon) snapshotDisk() (free, floor uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.cfg.Snapshots(), &st); err != nil {
		return 0, 0, false
	}
	return st.Bavail * uint64(st.Bsize), uint64(d.cfg.DiskKeepFree * float64(st.Blocks*uint64(st.Bsize))), true
}

// --user-disk-fraction: the share of the snapshot disk one non-root user's
// snapshots may take, so that one user's hibernated processes cannot fill
// the disk (root's, by default unbudgeted) or the whole budget.
const flagDiskFraction = "user-disk-fraction"

// userDiskShare is the bytes uid's snapshots may take: 0 (no cap) for root
// or with --user-disk-fraction 0.
func (d *Daemon) userDiskShare(uid uint32) uint64 {
	f := d.cfg.Limits.DiskFraction
	if uid == limits.Root || f <= 0 {
		return 0
	}
	base := d.cfg.DiskBudgetMiB << 20
	if base == 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(d.cfg.Snapshots(), &st); err != nil {
			return 0
		}
		base = st.Blocks * uint64(st.Bsize)
	}
	return max(1, uint64(f*float64(base)))
}

// diskShareOf names what a user's share of the snapshot disk is of.
func (d *Daemon) diskShareOf() string {
	if d.cfg.DiskBudgetMiB > 0 {
		return "--disk-budget"
	}
	return "the filesystem of " + d.cfg.Snapshots()
}

// dumpRoom is what a dump of uid's tree may write: what is left of the
// disk budget, of uid's share and of the filesystem above --disk-keep-free
// (less what dumps in flight will write yet), the smallest; ok false where
// none bounds it. Called before the dump counts itself in flight.
func (d *Daemon) dumpRoom(uid uint32) (room uint64, ok bool) {
	left := func(cap, used uint64) uint64 { return cap - min(cap, used) }
	if budget := d.cfg.DiskBudgetMiB << 20; budget > 0 {
		room, ok = left(budget, d.snaps.Bytes()), true
	}
	if above, _, _, floored := d.diskAboveFloor(); floored {
		above -= min(above, d.snaps.InFlight()) // what dumps in flight will write yet
		if !ok || above < room {
			room, ok = above, true
		}
	}
	if share := d.userDiskShare(uid); share > 0 {
		if mine := left(share, d.snaps.BytesOf(uid)); !ok || mine < room {
			room, ok = mine, true
		}
	}
	return room, ok
}
