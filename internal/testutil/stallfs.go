package testutil

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// StallDir mounts a FUSE file system that every user may search, in which
// looking up the name "stall" waits until release is called (or the test
// ends), however the kernel interrupts it: the stand-in for a user's own
// FUSE server that never answers (fusermount3 lets any user mount one
// where the daemon sees it). A path below mnt/stall holds whatever stats
// or opens it. It skips t where FUSE cannot be mounted.
func StallDir(t testing.TB) (mnt string, release func()) {
	t.Helper()
	RequiresRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	mnt, err := os.MkdirTemp("", "gsstall")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	if err := os.Chmod(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	server, err := fs.Mount(mnt, &stallRoot{gate: gate}, &fs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, FsName: "gpusched-stall", Name: "stall",
	}})
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	closed := false
	release = func() {
		if !closed {
			closed = true
			close(gate)
		}
	}
	t.Cleanup(func() {
		release()
		_ = server.Unmount()
	})
	return mnt, release
}

// stallRoot is the file system's only directory.
type stallRoot struct {
	fs.Inode
	gate chan struct{}
}

var (
	_ fs.NodeGetattrer = (*stallRoot)(nil)
	_ fs.NodeLookuper  = (*stallRoot)(nil)
)

func (r *stallRoot) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	return 0
}

// Lookup of "stall" ignores ctx: the kernel's interrupt of the lookup (a
// signal to the thread that waits) does not end it, as it would not with
// a hostile server. Every name is missing once released.
func (r *stallRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == "stall" {
		<-r.gate
	}
	return nil, syscall.ENOENT
}
