package lazypages

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestServerOnTreeCPUs: the server runs on the CPUs of the tree it
// restores (Options.CPUs, its caller's), not on all of its starter's.
// Before TestServerRunsInCgroups, which confines this process for good
// (after it, these CPUs are all the users' anyway).
func TestServerOnTreeCPUs(t *testing.T) {
	_, tree := testutil.CPUsApart(t)
	r := startServerWith(t, Options{Dir: t.TempDir(), CPUs: tree})
	testutil.WantThreadsOn(t, "the server", r.srv.cmd.Process.Pid, tree)
}

// TestServerRunsInCgroups: the server is born off its starter's own CPUs
// (--daemon-cpus) and moved into the cgroups it is given (a restore's
// CRIU worker's, a user's) before the restore connects, and spends its
// CPU there; its starter stays where it was.
func TestServerRunsInCgroups(t *testing.T) {
	_, userCPUs := testutil.ConfineSelf(t)
	mnt, top := testutil.CgroupTop(t)
	cg := filepath.Join(top, "lazypages")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	ours := testutil.CgroupOf(t, os.Getpid())
	const pages = 4 * readChunk / pageSize
	reg, data, dir := lazyImage(t, pages)
	r := startServerWith(t, Options{Dir: dir, ReadAhead: true, Cgroups: []string{cg}})
	pid := r.srv.cmd.Process.Pid
	if got, want := testutil.CgroupOf(t, pid), strings.TrimPrefix(cg, mnt); got != want {
		t.Errorf("the server is in cgroup %s, want %s", got, want)
	}
	testutil.WantThreadsOn(t, "the server", pid, userCPUs)
	r.send(1, reg)
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	equalPages(t, "lazy pages", reg.mem, data)
	if testutil.CgroupCPU(t, cg) == 0 {
		t.Errorf("the server spent no CPU in cgroup %s", cg)
	}
	if got := testutil.CgroupOf(t, os.Getpid()); got != ours {
		t.Errorf("this process moved from cgroup %s to %s", ours, got)
	}
}
