package treefiles

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestMain runs this binary as a holder where holderEnv says so.
func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Stdout.WriteString("ready\n")
		select {} // holds what it was given until killed
	}
	os.Exit(m.Run())
}

const holderEnv = "TREEFILES_HOLDER"

// holder starts a process that holds f at descriptor 3 and has its
// working directory in dir, until the test ends; it returns once the
// process has started (its files and mappings as they stay).
func holder(t *testing.T, f *os.File, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("holder: %v", err)
	}
	return cmd.Process.Pid
}

func create(t *testing.T, path, content string) *os.File {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func noneOwn(string) bool { return false }

// TestCheckRefusesAnotherFileAtThePath: a process that holds, at the same
// descriptor, a file of the same size and mode at the same path, but
// another file (the path pointed elsewhere between dump and restore, as a
// user's symlink would), fails the check; the very same file passes.
func TestCheckRefusesAnotherFileAtThePath(t *testing.T) {
	dir := t.TempDir()
	mine := create(t, filepath.Join(dir, "f"), "AAAA")
	was := holder(t, mine, dir)
	table, err := Take([]Proc{{PID: was, NSPID: 7}}, "boot-1", noneOwn)
	if err != nil {
		t.Fatal(err)
	}
	if !recorded(table, 7, "fd/3") || !recorded(table, 7, "cwd") || !recorded(table, 7, "exe") {
		t.Fatalf("the table lacks the descriptor, the working directory or the executable: %+v", table.Procs[7])
	}
	if err := Check(table, map[int]int{7: was}, "boot-1", nil); err != nil {
		t.Fatalf("the same process fails the check: %v", err)
	}

	// The path now leads to another file of the same size and mode.
	if err := os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "f.old")); err != nil {
		t.Fatal(err)
	}
	other := create(t, filepath.Join(dir, "f"), "BBBB")
	now := holder(t, other, dir)
	err = Check(table, map[int]int{7: now}, "boot-1", nil)
	if err == nil || !strings.Contains(err.Error(), "fd/3") || !strings.Contains(err.Error(), "pointed elsewhere") {
		t.Fatalf("another file at descriptor 3 passes the check: %v", err)
	}
}

// TestCheckAcrossBoots: after a reboot a file is known by its inode and
// type alone (device numbers may differ); within one boot the device
// counts too.
func TestCheckAcrossBoots(t *testing.T) {
	was := Identity{Key: "fd/3", Type: 0o100000, Dev: 1, Ino: 42}
	moved := was
	moved.Dev = 2
	if same(was, moved, true) {
		t.Error("another device within one boot is the same file")
	}
	if !same(was, moved, false) {
		t.Error("another device number after a reboot is another file")
	}
	other := was
	other.Ino = 43
	if same(was, other, false) {
		t.Error("another inode is the same file")
	}
	dev := Identity{Key: "fd/4", Type: 0o020000, Dev: 5, Ino: 9, Rdev: 0xc300}
	renumbered := dev
	renumbered.Ino, renumbered.Dev = 10, 6
	if !same(dev, renumbered, false) {
		t.Error("a device file is not known by its device")
	}
}

// TestTakeLeavesOutOwnAndDeleted: files the caller says are its own, and
// files deleted, are not recorded (CRIU restores deleted ones from the
// image; the caller's no user can point elsewhere).
func TestTakeLeavesOutOwnAndDeleted(t *testing.T) {
	dir := t.TempDir()
	f := create(t, filepath.Join(dir, "given"), "x")
	pid := holder(t, f, dir)
	own := func(path string) bool { return path == filepath.Join(dir, "given") }
	table, err := Take([]Proc{{PID: pid, NSPID: 1}}, "b", own)
	if err != nil {
		t.Fatal(err)
	}
	if recorded(table, 1, "fd/3") {
		t.Error("a file of the caller's own is recorded")
	}
	g := create(t, filepath.Join(dir, "gone"), "y")
	pid = holder(t, g, dir)
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if table, err = Take([]Proc{{PID: pid, NSPID: 1}}, "b", noneOwn); err != nil {
		t.Fatal(err)
	}
	if recorded(table, 1, "fd/3") {
		t.Error("a deleted file is recorded")
	}
}

// TestCompareMaps: a restore may map as one range what was two mappings
// of one file (or the reverse); another file over any address fails, and
// so does a range left unmapped or a file mapped where none was (a file
// deleted at the dump, which CRIU makes again, is deleted again by the
// check and not among what a process maps by path).
func TestCompareMaps(t *testing.T) {
	m := func(start, end, ino uint64) Identity {
		return Identity{Key: "map/" + string(rune('a'+start)), Type: 0o100000, Dev: 1, Ino: ino, Start: start, End: end}
	}
	was := []Identity{m(0, 10, 1), m(10, 20, 1), m(30, 40, 2)}
	for _, tt := range []struct {
		name string
		now  []Identity
		ok   bool
	}{
		{"same", []Identity{m(0, 10, 1), m(10, 20, 1), m(30, 40, 2)}, true},
		{"merged", []Identity{m(0, 20, 1), m(30, 40, 2)}, true},
		{"split", []Identity{m(0, 5, 1), m(5, 20, 1), m(30, 40, 2)}, true},
		{"another file", []Identity{m(0, 20, 1), m(30, 40, 3)}, false},
		{"another file over part", []Identity{m(0, 15, 1), m(15, 20, 9), m(30, 40, 2)}, false},
		{"unmapped", []Identity{m(0, 20, 1)}, false},
		{"mapped where none was", []Identity{m(0, 20, 1), m(22, 25, 7), m(30, 40, 2)}, false},
	} {
		err := compareMaps(was, tt.now, true, nil)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func recorded(t Table, ns int, key string) bool {
	for _, id := range t.Procs[ns] {
		if id.Key == key {
			return true
		}
	}
	return false
}

// TestSaveLoad: a table written into an images directory reads back;
// a directory without one is ErrNone.
func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err != ErrNone {
		t.Fatalf("no table: %v", err)
	}
	want := Table{Boot: "b", Procs: map[int][]Identity{1: {{Key: "fd/3", Type: 0o100000, Dev: 1, Ino: 2}}}}
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.Boot != "b" || len(got.Procs[1]) != 1 || got.Procs[1][0] != want.Procs[1][0] {
		t.Fatalf("read back %+v, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("table file: %v %v", fi, err)
	}
}

// TestCheckAccessAsTheOwner: a file a process holds passes only where its
// owner may have it as the process holds it: a root-only file read, or a
// file the owner may only read held for writing, fails.
func TestCheckAccessAsTheOwner(t *testing.T) {
	u := testutil.NewUser(t, "gstreef1", "gstreef")
	asOwner := func(fn func() error) error {
		return sandbox.AsCaller(sandbox.Cred{UID: u.UID, GID: u.GID, Groups: u.Groups()}, fn)
	}
	dir := testutil.ShortDir(t) // 0755: the owner may search it
	open := func(name string, mode os.FileMode, flag int) *os.File {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, tt := range []struct {
		name string
		f    *os.File
		want string // "" passes
	}{
		{"readable, read", open("pub", 0o644, os.O_RDONLY), ""},
		{"root-only, read", open("secret", 0o600, os.O_RDONLY), "may not read"},
		{"readable, written", open("pub-rw", 0o644, os.O_RDWR), "may not read and write"},
	} {
		pid := holder(t, tt.f, dir)
		err := CheckAccess(map[int]int{1: pid}, nil, asOwner)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "fd/3")) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestCheckSkipsProcessesThatHeldNothing: a process that held no file by
// path (a zombie: its files are gone) need not be in the restored tree, where
// it is gone by the time the tree is checked; one that held files must be.
func TestCheckSkipsProcessesThatHeldNothing(t *testing.T) {
	dir := t.TempDir()
	pid := holder(t, create(t, filepath.Join(dir, "f"), "x"), dir)
	table, err := Take([]Proc{{PID: pid, NSPID: 1}}, "b", noneOwn)
	if err != nil {
		t.Fatal(err)
	}
	table.Procs[2] = nil // the zombie
	if err := Check(table, map[int]int{1: pid}, "b", nil); err != nil {
		t.Fatalf("a process that held nothing is looked for: %v", err)
	}
	if err := Check(table, map[int]int{}, "b", nil); err == nil || !strings.Contains(err.Error(), "lacks its process 1") {
		t.Fatalf("a process that held files is not looked for: %v", err)
	}
}

// TestTakeKnowsDeletedByLinksNotName: a file whose own name ends in
// " (deleted)", as /proc shows a deleted one's, is recorded (CRIU reopens
// it by its path); a deleted working directory fails the take (CRIU would
// make it again at its path, as root).
func TestTakeKnowsDeletedByLinksNotName(t *testing.T) {
	dir := t.TempDir()
	f := create(t, filepath.Join(dir, "x (deleted)"), "x")
	pid := holder(t, f, dir)
	table, err := Take([]Proc{{PID: pid, NSPID: 1}}, "b", noneOwn)
	if err != nil {
		t.Fatal(err)
	}
	if !recorded(table, 1, "fd/3") {
		t.Fatalf("a file named like a deleted one is not recorded: %+v", table.Procs[1])
	}
	gone := filepath.Join(dir, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	pid = holder(t, f, gone)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if _, err := Take([]Proc{{PID: pid, NSPID: 1}}, "b", noneOwn); !errors.Is(err, ErrDeletedDir) {
		t.Fatalf("a deleted working directory: %v", err)
	}
}

// TestCompareRefusesWhatWasNotHeld: a restored process holding by path a
// file at a descriptor it did not have when dumped fails (a file unlinked
// in the dump's last moments was left out of the record while CRIU had
// imaged it by its path), but for CRIU's own until the tree runs (what the
// caller names, the tree's root) and files CRIU made again from the image.
func TestCompareRefusesWhatWasNotHeld(t *testing.T) {
	was := []Identity{{Key: "fd/3", Type: 0o100000, Dev: 1, Ino: 2, path: "/home/u/f"}}
	extra := func(path string, ino uint64) []Identity {
		return append(slices.Clone(was), Identity{Key: "fd/5", Type: 0o100000, Dev: 1, Ino: ino, path: path})
	}
	if err := compare(was, extra("/var/tmp/target", 9), true, nil); !errors.Is(err, ErrMoved) {
		t.Errorf("a file not held when dumped: %v", err)
	}
	if err := compare(was, extra("/home/u/g (deleted)", 9), true, nil); err != nil {
		t.Errorf("a deleted file CRIU made again: %v", err)
	}
	if err := compare(was, extra("/var/lib/gpusched/snapshots/s/restore.log", 9), true, map[[2]uint64]bool{{1, 9}: true}); err != nil {
		t.Errorf("CRIU's own log: %v", err)
	}
	if err := compare(was, extra("/", 2), true, nil); err != nil {
		t.Errorf("the tree's root: %v", err)
	}
}

// TestCheckRefusesAWatchOfAnotherFile: CRIU re-adds an inotify watch by the
// path it had, as root: a watch now on another directory (the watched
// path pointed at one of root's) fails the check; the same watch passes.
func TestCheckRefusesAWatchOfAnotherFile(t *testing.T) {
	watch := func(dir string) *os.File {
		t.Helper()
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_ALL_EVENTS); err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "inotify")
		t.Cleanup(func() { f.Close() })
		return f
	}
	mine, roots := t.TempDir(), t.TempDir()
	was := holder(t, watch(mine), mine)
	table, err := Take([]Proc{{PID: was, NSPID: 1}}, "b", noneOwn)
	if err != nil {
		t.Fatal(err)
	}
	if !recorded(table, 1, "fd/3/wd/1") {
		t.Fatalf("the watch is not recorded: %+v", table.Procs[1])
	}
	if err := Check(table, map[int]int{1: was}, "b", nil); err != nil {
		t.Fatalf("the same watch: %v", err)
	}
	now := holder(t, watch(roots), mine)
	if err := Check(table, map[int]int{1: now}, "b", nil); !errors.Is(err, ErrMoved) || !strings.Contains(err.Error(), "fd/3/wd/1") {
		t.Fatalf("a watch of another directory: %v", err)
	}
}

// TestCheckHeldInBatches: the files are checked a batch at a time, so no
// more than checkBatch descriptors are open at once, and a refusal in a
// later batch is still found.
func TestCheckHeldInBatches(t *testing.T) {
	var files []held
	for i := range checkBatch*2 + 1 {
		files = append(files, held{key: "fd/" + strconv.Itoa(i), path: "/", link: "/", mode: unix.R_OK})
	}
	calls := 0
	asOwner := func(fn func() error) error { calls++; return fn() }
	if err := checkHeld(files, asOwner); err != nil || calls != 3 {
		t.Fatalf("%d files: %d batches, %v", len(files), calls, err)
	}
	files[len(files)-1].mode = unix.W_OK
	denyAll := func(fn func() error) error {
		return sandbox.AsCaller(sandbox.Cred{UID: 65534, GID: 65534, Groups: []uint32{}}, fn)
	}
	if err := checkHeld(files, denyAll); !errors.Is(err, ErrDenied) {
		t.Fatalf("a refusal in the last batch: %v", err)
	}
}
