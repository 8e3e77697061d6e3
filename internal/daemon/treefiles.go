package daemon

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/treefiles"
	"github.com/gpusched/gpusched/internal/treesockets"
)

// takeTreeFiles records, as CRIU ends a dump of rec's tree into dir (the
// tree seized: checkpoint.DumpOpts.Dumped), which files its processes
// hold by path, for checkTreeFiles to hold the restore of that image to
// (treefiles: CRIU reopens them by path, as root).
func (d *Daemon) takeTreeFiles(rec proctable.Record, dir string) error {
	byNS, _, err := treeByNS(rec.InitPID)
	if err != nil {
		return fmt.Errorf("files of the tree: %w", err)
	}
	procs := make([]treefiles.Proc, 0, len(byNS))
	for ns, ref := range byNS {
		procs = append(procs, treefiles.Proc{PID: ref.PID, NSPID: ns})
	}
	t, err := treefiles.Take(procs, d.bootID, d.givenFile)
	if err != nil {
		return fmt.Errorf("files of the tree: %w", err)
	}
	if err := checkpoint.CheckImages(dir, rec.Owner.UID != 0); err != nil {
		return err
	}
	return treefiles.Save(dir, t)
}

// checkTreeFiles fails the restore of rec's tree, restored at initPID from
// dir and not yet run, where one of its processes holds another file by
// path than it held when dumped (treefiles.Check, where the image has a
// record: those dumped before 2026-11-29 have none), or, for a user's
// tree, one its owner may not have as the process holds it
// (treefiles.CheckAccess); a user's tree then has its sockets, which CRIU
// made as root's, given back (treesockets.Own).
func (d *Daemon) checkTreeFiles(rec proctable.Record, initPID int, dir string) error {
	t, err := treefiles.Load(dir)
	if err != nil && !errors.Is(err, treefiles.ErrNone) {
		return err
	}
	byNS, _, err := treeByNS(initPID)
	if err != nil {
		return err
	}
	pids := make(map[int]int, len(byNS))
	for ns, ref := range byNS {
		pids[ns] = ref.PID
	}
	// What the daemon gave the tree, and what CRIU's restore keeps open in
	// its processes until they run (its images and its log).
	given := []string{rec.LogPath, rec.StatusPath, d.sandboxHome(rec.ID), d.helperPath, dir, filepath.Join(dir, checkpoint.RestoreLog)}
	if t.Procs != nil {
		if err := treefiles.Check(t, pids, d.bootID, given); err != nil {
			return err
		}
	}
	if rec.Owner.UID == 0 {
		return nil
	}
	cred := sandbox.Cred{UID: rec.Owner.UID, GID: rec.Owner.GID, Groups: rec.Owner.Groups}
	if err := treefiles.CheckAccess(pids, given, func(fn func() error) error { return sandbox.AsCaller(cred, fn) }); err != nil {
		return err
	}
	return treesockets.Own(slices.Collect(maps.Values(pids)), rec.Owner.UID, rec.Owner.GID)
}

// givenFile reports whether path is one the daemon gave a tree: in a
// directory only root reaches (logs, exit statuses, the supervisors'
// homes, snapshots), or the supervisor's binary. No user can point such a
// path elsewhere, and a fork's copy has its own log and status there.
func (d *Daemon) givenFile(path string) bool {
	if path == d.helperPath {
		return true
	}
	for _, dir := range []string{d.cfg.LogDir, d.statusDir(), d.sandboxDir(), d.snaps.Dir()} {
		if abs, err := filepath.Abs(dir); err == nil && strings.HasPrefix(path, abs+"/") {
			return true
		}
	}
	return false
}

// vetImages fails where a restore of rec's tree from dir would act as root
// before checkTreeFiles can look: what checkpoint.CheckImages refuses (a
// snapshot dumped before its dump was refused for it), and, for a user's
// tree, a port its network sockets bind that a socket of the host's holds
// now (CRIU binds them as root's, with SO_REUSEPORT: taking that socket's
// traffic until the check after the restore refuses it, for as long as the
// owner can hold the restore up).
func vetImages(rec proctable.Record, dir string) error {
	if err := checkpoint.CheckImages(dir, rec.Owner.UID != 0); err != nil || rec.Owner.UID == 0 {
		return err
	}
	binds, err := checkpoint.InetBinds(dir)
	if err != nil {
		return err
	}
	return treesockets.Taken(binds)
}
