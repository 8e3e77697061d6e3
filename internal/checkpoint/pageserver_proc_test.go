package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestPageServerProcessOnTreeCPUs: a page server runs on the CPUs of the
// tree it dumps (PageServerOptions.CPUs, its caller's), not on all of its
// starter's. Before TestPageServerProcessRunsInCgroup, which confines this
// process for good (after it, these CPUs are all the users' anyway).
func TestPageServerProcessOnTreeCPUs(t *testing.T) {
	_, tree := testutil.CPUsApart(t)
	ps, err := StartPageServerProcess(context.Background(), PageServerOptions{Path: testutil.Build(t).Daemon, Dir: t.TempDir(), CPUs: tree})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	testutil.WantThreadsOn(t, "the page server", ps.cmd.Process.Pid, tree)
}

// TestPageServerProcessRunsInCgroup: a page server process is born off
// its starter's own CPUs (--daemon-cpus) and moved into the cgroups it is
// given (a dump's CRIU worker's, a user's) before it has its request,
// spends its CPU there and names its threads; its starter stays where it
// was.
func TestPageServerProcessRunsInCgroup(t *testing.T) {
	daemonCPUs, userCPUs := testutil.ConfineSelf(t)
	mnt, top := testutil.CgroupTop(t)
	cg := filepath.Join(top, "pages")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	ours := testutil.CgroupOf(t, os.Getpid())
	images := t.TempDir()
	ps, err := StartPageServerProcess(context.Background(), PageServerOptions{Path: testutil.Build(t).Daemon, Dir: images, Cgroups: []string{cg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	pid := ps.cmd.Process.Pid
	if got, want := testutil.CgroupOf(t, pid), strings.TrimPrefix(cg, mnt); got != want {
		t.Errorf("the page server is in cgroup %s, want %s", got, want)
	}
	testutil.WantThreadsOn(t, "the page server", pid, userCPUs)
	testutil.WantThreadsOn(t, "its starter", os.Getpid(), daemonCPUs)
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err != nil || strings.TrimSpace(string(comm)) != pageServerComm {
		t.Errorf("the page server's name %q (%v), want %q", comm, err, pageServerComm)
	}
	key := pagemapKey{id: 1}
	mem := psRandomMemory(7, map[pagemapKey][][2]uint64{key: {{0x400000, 4096}}})
	if st := psTransfer(t, ps, mem, psClient{}); st.Pages != 4096 || st.Written < 4096*pageSize {
		t.Errorf("stats %+v, want 4096 pages written", st)
	}
	psCheckImage(t, images, mem)
	if testutil.CgroupCPU(t, cg) == 0 {
		t.Errorf("the page server spent no CPU in cgroup %s", cg)
	}
	if got := testutil.CgroupOf(t, os.Getpid()); got != ours {
		t.Errorf("this process moved from cgroup %s to %s", ours, got)
	}
}
