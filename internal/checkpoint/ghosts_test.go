package checkpoint

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/regfile"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestRestoreStagesGhosts: a tree holding a file it deleted, whose
// directory is then swapped for a symlink to another (as an owner would
// point it at one of root's), is restored with its file's content, and
// CRIU makes nothing in, and removes nothing from, the directory the path
// now leads to: the ghost is made again in a stage of root's. Without
// the stage CRIU makes "victim.cr.1.ghost" there and links and unlinks by
// the path (red team H1: root's file of that name unlinked). A tree
// restored twice finds its files image as dumped each time.
// The file is held on the images' own mount (staged in the images
// directory) and on /dev/shm's tmpfs (staged at that mount's top).
func TestRestoreStagesGhosts(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	t.Run("images' mount", func(t *testing.T) { restoreStagesGhosts(t, t.TempDir(), false) })
	t.Run("a mount of its own", func(t *testing.T) {
		var shm, tmp unix.Stat_t
		if unix.Stat("/dev/shm", &shm) != nil || unix.Stat(t.TempDir(), &tmp) != nil || shm.Dev == tmp.Dev {
			t.Skip("needs /dev/shm on a mount of its own")
		}
		work, err := os.MkdirTemp("/dev/shm", "gs-ghosts-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(work) })
		restoreStagesGhosts(t, work, true)
	})
}

func restoreStagesGhosts(t *testing.T, work string, atMountTop bool) {
	c := newTestCRIU(t)
	d, elsewhere := filepath.Join(work, "d"), filepath.Join(work, "elsewhere")
	for _, dir := range []string{d, elsewhere} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rootFile := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(rootFile, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(work, "job.log")
	cmd := exec.Command("/usr/bin/python3", "-c", testutil.DeletedFileHolder, filepath.Join(d, "victim"), "hello")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	testutil.InTree(cmd, log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitLog(t, log, "read hello\n")
	dir := imagesDir(t)
	if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	files, err := os.ReadFile(filepath.Join(dir, filesImage))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d, d+".kept"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, d); err != nil {
		t.Fatal(err)
	}
	stage := stagedAt(t, dir)
	if want := dir + "/"; atMountTop && !strings.HasPrefix(stage, "/dev/shm/.gpusched-ghosts-") || !atMountTop && !strings.HasPrefix(stage, want) {
		t.Fatalf("staged at %s (want it at the mount's top: %v)", stage, atMountTop)
	}
	seen := testutil.WatchDir(t, elsewhere)
	for round := 1; round <= 2; round++ {
		pid, err := c.Restore(context.Background(), RestoreOpts{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		waitLog(t, log, strings.Repeat("read hello\n", round+1))
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, nil, 0, nil)
		if names := seen(); len(names) > 0 {
			t.Fatalf("restore %d acted in the directory the path was pointed at: %v", round, names)
		}
		if b, err := os.ReadFile(rootFile); err != nil || string(b) != "root's" {
			t.Fatalf("the file the path now leads to: %q, %v", b, err)
		}
		if now, err := os.ReadFile(filepath.Join(dir, filesImage)); err != nil || string(now) != string(files) {
			t.Fatalf("restore %d left the files image changed (%v)", round, err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".gpusched-ghosts-*")); len(left) > 0 {
			t.Fatalf("restore %d left its stage: %v", round, left)
		}
	}
}

// stagedAt stages dir's ghosts as a restore does, checks the stage is a
// directory only root may enter, undoes it as the next restore does after
// a daemon died in one (unstageGhosts) and checks the stage gone and the
// files image as dumped, and returns where the stage was.
func stagedAt(t *testing.T, dir string) string {
	t.Helper()
	dumped, err := os.ReadFile(filepath.Join(dir, filesImage))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stageGhosts(dir); err != nil {
		t.Fatal(err)
	}
	ghosts, _, err := ghostsOf(dir)
	if err != nil || len(ghosts) != 1 {
		t.Fatalf("ghosts: %d, %v", len(ghosts), err)
	}
	stage := filepath.Dir(ghosts[0].reg.Reg.GetName())
	var st unix.Stat_t
	if err := unix.Lstat(stage, &st); err != nil || st.Mode != unix.S_IFDIR|0o700 || st.Uid != 0 {
		t.Fatalf("stage %s: mode %o uid %d (%v)", stage, st.Mode, st.Uid, err)
	}
	if err := unstageGhosts(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stage); !os.IsNotExist(err) {
		t.Fatalf("stage %s after undo: %v", stage, err)
	}
	if now, err := os.ReadFile(filepath.Join(dir, filesImage)); err != nil || string(now) != string(dumped) {
		t.Fatalf("files image after undo: changed (%v)", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, stagesFile)); !os.IsNotExist(err) {
		t.Fatalf("the stages' list after undo: %v", err)
	}
	return stage
}

// TestGhostStagesRefuseAMountAUserControls: a ghost on a mount whose top
// is a user's directory (as a user's own FUSE mount would be), with the
// images elsewhere, has no stage: ErrNoGhostStage, and nothing is made.
func TestGhostStagesRefuseAMountAUserControls(t *testing.T) {
	top := t.TempDir()
	if err := os.Chown(top, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(top, &st); err != nil {
		t.Fatal(err)
	}
	m := &mnt.MntEntry{MntId: ptr(uint32(7)), Mountpoint: ptr("." + top), RootDev: ptr(uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev)))}
	g := ghost{reg: &fdinfo.FileEntry{Reg: &regfile.RegFileEntry{Id: ptr(uint32(3)), Name: ptr(filepath.Join(top, "x"))}}, mount: m}
	images := imagesDir(t)
	if _, err := ghostStages(images, []ghost{g}); !errors.Is(err, ErrNoGhostStage) {
		t.Fatalf("a ghost on a user's mount: %v, want ErrNoGhostStage", err)
	}
	if left, _ := os.ReadDir(top); len(left) != 0 {
		t.Fatalf("made %v", left)
	}
	if err := os.Chown(top, 0, 0); err != nil {
		t.Fatal(err)
	}
	if parents, err := ghostStages(images, []ghost{g}); err != nil || parents[7] == "" {
		t.Fatalf("the same mount, root's: %v, %v", parents, err)
	}
}
