package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
)

// credOf is whom a record's tree runs as.
func credOf(o proctable.Owner) sandbox.Cred {
	groups := o.Groups
	if groups == nil {
		groups = []uint32{}
	}
	return sandbox.Cred{UID: o.UID, GID: o.GID, Groups: groups}
}

// sandboxMark is the environment of this daemon's supervisors: it tells
// the trees of this daemon from those of another (see sweepUntrackedTrees).
func (d *Daemon) sandboxMark() string { return "GPUSCHED_SOCKET=" + d.cfg.Socket }

// sandboxDir holds the supervisors' private working directories, one per
// record id, under the root-only state directory.
func (d *Daemon) sandboxDir() string { return filepath.Join(d.cfg.StateDir, "sandbox") }

func (d *Daemon) sandboxHome(id string) string { return filepath.Join(d.sandboxDir(), id) }

// makeSandboxHome creates the private working directory of record id's
// supervisor (kept while the record may be restored: CRIU restores the
// supervisor into it).
func (d *Daemon) makeSandboxHome(id string) (string, error) {
	home := d.sandboxHome(id)
	if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("supervisor directory: %w", err)
	}
	return home, nil
}

// removeSandboxHome removes record id's supervisor directory, with what a
// CRIU dump cut short may have left in it.
func (d *Daemon) removeSandboxHome(id string) {
	clearProcMount(d.sandboxHome(id))
	os.RemoveAll(d.sandboxHome(id))
}

// parasiteProc is the directory CRIU's parasite mounts a proc instance on,
// in the working directory of the tree's root, while it dumps the tree
// (criu/pie/parasite.c, get_proc_fd); it detaches and removes it at once,
// unless CRIU was killed in between.
const parasiteProc = "proc.crtools"

// clearProcMount removes what a CRIU dump killed mid-way left in home: a
// second dump's parasite would fail to create the directory again.
func clearProcMount(home string) {
	p := filepath.Join(home, parasiteProc)
	if _, err := os.Lstat(p); err != nil {
		return
	}
	_ = unix.Unmount(p, unix.MNT_DETACH)
	_ = os.Remove(p)
}

// sweepSandboxHomes removes the supervisor directories no live record owns
// (a daemon killed between creating one and recording its exit): run at
// start, before anything may create one.
func (d *Daemon) sweepSandboxHomes() {
	ents, err := os.ReadDir(d.sandboxDir())
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, r := range d.table.View().Records {
		if r.Live() {
			live[r.ID] = true
		}
	}
	for _, e := range ents {
		if !live[e.Name()] {
			d.removeSandboxHome(e.Name())
		}
	}
}
