package testutil

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
// or opens it. It skips t where FUSE cannot be mounted. Call it in a mount
// namespace of the test's own (InOwnMountNamespace).
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

// ownMountsEnv names, in the process InOwnMountNamespace starts, the test
// it runs there.
const ownMountsEnv = "GPUSCHED_TEST_OWN_MOUNTS"

// InOwnMountNamespace runs the calling test again in a process of its own,
// in a mount namespace of its own (unshare(1) --mount --propagation
// private), so that what it mounts is seen nowhere else on the host: a
// FUSE mount fails every CRIU dump of a process that sees it ("failed to
// dump fs ... (fuse)"), as other packages' tests make at the same time. It
// returns true in that process, where the test goes on, and false in the
// first once that process has passed (skipping t where it skipped).
func InOwnMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownMountsEnv) == t.Name() {
		return true
	}
	RequiresRoot(t)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), ownMountsEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("%s in a mount namespace of its own: %v\n%s", t.Name(), err, out)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name())):
		t.Skipf("in a mount namespace of its own:\n%s", out)
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatalf("%s in a mount namespace of its own did not run:\n%s", t.Name(), out)
	}
	return false
}
