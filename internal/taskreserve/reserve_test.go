package taskreserve

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// fakeHost lays out, in plain directories, a host whose kernel allows
// pidMax pids and threadsMax threads, with mountinfo's lines.
func fakeHost(t *testing.T, pidMax, threadsMax int, mountinfo ...string) (string, Paths) {
	t.Helper()
	dir := t.TempDir()
	p := Paths{Self: filepath.Join(dir, "self-cgroup"), MountInfo: filepath.Join(dir, "mountinfo"), Kernel: filepath.Join(dir, "kernel")}
	write(t, p.MountInfo, strings.Join(mountinfo, "\n")+"\n")
	write(t, filepath.Join(p.Kernel, "pid_max"), fmt.Sprintln(pidMax))
	write(t, filepath.Join(p.Kernel, "threads-max"), fmt.Sprintln(threadsMax))
	return dir, p
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSetupLeavesTheReserve: on a cgroup v1 pids hierarchy the trees get a
// cgroup below the daemon's whose pids.max is the least limit above it
// (its own cgroup's, an ancestor's, or the kernel's pid_max and
// threads-max) less the reserve, or half of it where the reserve is more
// than half.
func TestSetupLeavesTheReserve(t *testing.T) {
	for _, tc := range []struct {
		name             string
		pidMax, threads  int
		parent, own      string // pids.max of the daemon's cgroup's parent, and its own
		kept             int
		wantMax, wantLim int64
	}{
		{"its own cgroup's", 32768, 190000, "max", "4915", 512, 4403, 4915},
		{"an ancestor's", 32768, 190000, "300", "max", 64, 236, 300},
		{"the nearest is not the least", 32768, 190000, "300", "1000", 64, 236, 300},
		{"pid_max", 32768, 190000, "max", "max", 512, 32256, 32768},
		{"threads-max", 4194304, 10000, "max", "max", 512, 9488, 10000},
		{"half, the reserve more than half", 32768, 190000, "max", "100", 64, 50, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, p := fakeHost(t, tc.pidMax, tc.threads, "")
			mnt := filepath.Join(dir, "pids")
			write(t, p.MountInfo, "36 25 0:31 / "+mnt+" rw,relatime shared:14 - cgroup cgroup rw,pids\n")
			write(t, p.Self, "9:name=systemd:/system.slice/d.service\n8:pids:/system.slice/d.service\n0::/\n")
			write(t, filepath.Join(mnt, "system.slice", "pids.max"), tc.parent)
			write(t, filepath.Join(mnt, "system.slice", "d.service", "pids.max"), tc.own)
			r, err := Detect(tc.kept, "", p)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Setup(); err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(mnt, "system.slice", "d.service", TreesGroup)
			if r.Dir() != want || r.Join(0) != want || r.Max() != tc.wantMax || r.Limit() != tc.wantLim {
				t.Fatalf("trees in %s at most %d of %d; want %s, %d of %d", r.Dir(), r.Max(), r.Limit(), want, tc.wantMax, tc.wantLim)
			}
			if got := read(t, filepath.Join(want, "pids.max")); got != strconv.FormatInt(tc.wantMax, 10) {
				t.Fatalf("pids.max %q, want %d", got, tc.wantMax)
			}
			if err := r.Setup(); err != nil { // a restarted daemon's
				t.Fatalf("again: %v", err)
			}
			// The operator lowers the daemon's cgroup's limit while it runs.
			write(t, filepath.Join(mnt, "system.slice", "d.service", "pids.max"), "90")
			if err := r.Refresh(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(want, "pids.max")); got != "45" || r.Max() != 45 || r.Limit() != 90 {
				t.Fatalf("after the limit fell to 90: pids.max %q (%d of %d), want 45, half", got, r.Max(), r.Limit())
			}
		})
	}
}

// TestUsersShareTheTrees: with ShareByUser each non-root user's trees go
// in a cgroup of their own below the trees', at most that share of the
// trees' tasks, which follows the trees' limit; root's stay in the trees'
// own; the restore of a user's tree joins the user's.
func TestUsersShareTheTrees(t *testing.T) {
	dir, p := fakeHost(t, 32768, 190000, "")
	mnt := filepath.Join(dir, "pids")
	write(t, p.MountInfo, "36 25 0:31 / "+mnt+" rw,relatime shared:14 - cgroup cgroup rw,pids\n")
	write(t, p.Self, "8:pids:/d.service\n0::/\n")
	own := filepath.Join(mnt, "d.service")
	write(t, filepath.Join(own, "pids.max"), "1000")
	r, err := Detect(100, "", p)
	if err != nil {
		t.Fatal(err)
	}
	r.ShareByUser(0.5)
	if err := r.Setup(); err != nil {
		t.Fatal(err)
	}
	trees := filepath.Join(own, TreesGroup)
	if err := r.Place(41, 1001); err != nil {
		t.Fatal(err)
	}
	if err := r.Place(42, 0); err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(trees, "u1001")
	if got := read(t, filepath.Join(user, "pids.max")); got != "450" {
		t.Fatalf("user 1001's pids.max %q, want 450: half the trees' 900", got)
	}
	if read(t, filepath.Join(user, "cgroup.procs")) != "41" || read(t, filepath.Join(trees, "cgroup.procs")) != "42" {
		t.Fatal("a user's process not in their cgroup, or root's not in the trees'")
	}
	if r.Join(1001) != user || r.Join(0) != trees {
		t.Fatalf("restores join %s and %s; want %s and %s", r.Join(1001), r.Join(0), user, trees)
	}
	write(t, filepath.Join(own, "pids.max"), "500")
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(user, "pids.max")); got != "200" {
		t.Fatalf("after the limit fell to 500: user 1001's pids.max %q, want 200, half the trees' 400", got)
	}
}

// TestDetectOnCgroupV2: the trees' cgroups' parent (cgroup.Manager's
// procs) holds them when its parent offers pids; nothing is moved or
// joined there (each tree's own cgroup is made below it).
func TestDetectOnCgroupV2(t *testing.T) {
	dir, p := fakeHost(t, 4194304, 1000000, "")
	mnt := filepath.Join(dir, "cg2")
	write(t, p.MountInfo, "30 25 0:26 / "+mnt+" rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
	service := filepath.Join(mnt, "system.slice", "gpuschedd.service")
	procs := filepath.Join(service, "procs")
	write(t, filepath.Join(service, "cgroup.controllers"), "cpu memory\n")
	write(t, filepath.Join(service, "pids.max"), "4915\n")
	write(t, filepath.Join(procs, "cgroup.procs"), "")
	if _, err := Detect(512, procs, p); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "pids controller") {
		t.Fatalf("without pids in %s: %v, want ErrUnavailable naming the controller", service, err)
	}
	write(t, filepath.Join(service, "cgroup.controllers"), "cpu memory pids\n")
	r, err := Detect(512, procs, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(); err != nil {
		t.Fatal(err)
	}
	if r.Dir() != procs || r.Join(0) != "" || read(t, filepath.Join(procs, "pids.max")) != "4403" {
		t.Fatalf("trees in %s, pids.max %s; want %s, 4403", r.Dir(), read(t, filepath.Join(procs, "pids.max")), procs)
	}
	if err := r.Place(os.Getpid(), 1001); err != nil || read(t, filepath.Join(procs, "cgroup.procs")) != "" {
		t.Fatalf("place on cgroup v2: %v; want nothing moved (the tree's own cgroup is below)", err)
	}
}

// TestDetectUnavailable: no reserve without a pids hierarchy holding the
// daemon, or with none to keep.
func TestDetectUnavailable(t *testing.T) {
	_, p := fakeHost(t, 32768, 190000, "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw")
	write(t, p.Self, "0::/system.slice/d.service\n")
	if _, err := Detect(512, "", p); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cgroup v2 without the trees' cgroups: %v, want ErrUnavailable", err)
	}
	if _, err := Detect(0, "", p); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a reserve of 0: %v, want ErrUnavailable", err)
	}
}

// TestTreesHeldBelowTheDaemon is the real thing on this host's cgroup v1
// pids hierarchy: a cgroup standing for the daemon's, limited to 40
// tasks with 10 kept; a shell placed in the trees' cgroup starts 60
// sleepers, and the kernel refuses it past the trees' 30, leaving the
// daemon's cgroup 10 tasks.
func TestTreesHeldBelowTheDaemon(t *testing.T) {
	mnt := testutil.CgroupV1Mount(t, "pids")
	host := HostPaths()
	own := filepath.Join(mnt, fmt.Sprintf("gstaskreserve-%d", os.Getpid()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(own, "pids.max"), "40")
	self := filepath.Join(t.TempDir(), "self-cgroup")
	write(t, self, "8:pids:/"+filepath.Base(own)+"\n")
	host.Self = self
	r, err := Detect(10, "", host)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(); err != nil {
		t.Fatal(err)
	}
	if r.Max() != 30 {
		t.Fatalf("trees' pids.max %d, want 30", r.Max())
	}
	// The shell waits on its standard input to be placed. dash gives up
	// at the first fork it cannot make, leaving the sleepers it made; this
	// process reaps them (this host's init may be slow to), so that the
	// cgroups can go.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `read x; for i in $(seq 60); do sleep 1000 & done; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for {
			if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
				break
			}
		}
		for _, dir := range []string{r.Dir(), own} {
			if err := os.Remove(dir); err != nil {
				t.Errorf("remove %s: %v", dir, err)
			}
		}
	})
	if err := r.Place(cmd.Process.Pid, 0); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err == nil {
		t.Fatal("the shell started all 60 sleepers")
	}
	if cur := read(t, filepath.Join(r.Dir(), "pids.current")); cur != "29" {
		t.Fatalf("the trees' cgroup holds %s tasks once the shell gave up; want its 30 less the shell", cur)
	}
	if events := read(t, filepath.Join(r.Dir(), "pids.events")); events == "max 0" {
		t.Fatalf("the trees' cgroup never refused a fork: pids.events %q", events)
	}
}
