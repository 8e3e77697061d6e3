package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// asUser makes tr's spec run as a real unprivileged user.
func (tr *tree) asUser(s Spec, u testutil.User) Spec {
	s.Cred = Cred{UID: u.UID, GID: u.GID, Groups: u.Groups()}
	s.Dir = "/"
	return s
}

// TestSupervisorOutOfCallersReach runs the attacker as an unprivileged
// user, also preloaded into everything the caller's environment reaches: it
// takes no descriptor of the supervisor, cannot ptrace it or read its
// environment, and the root-owned log and status file stay as they were.
func TestSupervisorOutOfCallersReach(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsbox1", "gsbox")
	a := testutil.BuildAttacker(t)
	s := tr.asUser(tr.spec(a.Bin), u)
	s.Env = append(s.Env, "LD_PRELOAD="+a.Preload)
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	r := tr.wait(st)
	if r.Code == nil || *r.Code != 0 {
		t.Fatalf("report %+v, want code 0", r)
	}
	log := tr.logText()
	// Two attacks ran: the preloaded constructor, then main.
	if got := strings.Count(log, "attacker: uid "+fmt.Sprint(u.UID)+" took 0 fds (pids), grew 0 files, ptrace parent: Operation not permitted, environ parent: Permission denied"); got != 2 {
		t.Fatalf("log %q: want two attacks that got nothing", log)
	}
	for _, f := range []string{tr.logPath(), filepath.Join(tr.dir, "private", "status")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 4096 {
			t.Errorf("%s grew to %d bytes", f, fi.Size())
		}
	}
}

// TestCommandRunsWithCallersCredentialsOnly: the command holds exactly the
// caller's uid, gid and groups and no capability, and no descriptor but
// its stdio, although the daemon holds inheritable ones.
func TestCommandRunsWithCallersCredentialsOnly(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsbox1", "gsbox")
	leak, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // inheritable: no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	s := tr.asUser(tr.spec("sh", "-c", `grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Amb)):' /proc/self/status; ls /proc/self/fd | tr '\n' ' '`), u)
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	tr.wait(st)
	want := fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d\nGid:\t%[2]d\t%[2]d\t%[2]d\t%[2]d\nGroups:\t%[3]d \n"+
		"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n0 1 2 3 ",
		u.UID, u.GID, u.GroupGID)
	if got := tr.logText(); got != want {
		t.Fatalf("command sees\n%s\nwant\n%s", got, want)
	}
}

// TestLogHeldToCap: a command that writes far past the cap, and tries to
// grow its output to 5 GiB, leaves a log and one rotated copy each within
// the cap (plus one write), in real disk blocks too.
func TestLogHeldToCap(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsbox1", "gsbox")
	s := tr.asUser(tr.spec("sh", "-c", `truncate -s 5G /proc/self/fd/1; head -c 8000000 /dev/zero | tr '\0' x`), u)
	s.LogMax, s.LogKeep = 1<<20, 1
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	tr.wait(st)
	for _, f := range []string{tr.logPath(), tr.logPath() + ".1"} {
		var fs syscall.Stat_t
		if err := syscall.Stat(f, &fs); err != nil {
			t.Fatal(err)
		}
		if fs.Size > 1<<20+64<<10 || fs.Blocks*512 > 2<<20 {
			t.Errorf("%s: %d bytes, %d in blocks; cap 1 MiB", f, fs.Size, fs.Blocks*512)
		}
		if fs.Uid != 0 {
			t.Errorf("%s is owned by uid %d, want root", f, fs.Uid)
		}
	}
}

// TestCheckCommandAsCaller: a path in a directory the caller may not enter
// is refused whether or not it exists, as the caller's own access would be.
func TestCheckCommandAsCaller(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsbox1", "gsbox")
	private := filepath.Join(tr.dir, "private")
	c := Cred{UID: u.UID, GID: u.GID, Groups: u.Groups()}
	if err := CheckCommand(c, "true", "", "/"); err != nil {
		t.Fatalf("true in /: %v", err)
	}
	for _, dir := range []string{tr.home, filepath.Join(private, "missing")} {
		if err := CheckCommand(c, "true", "", dir); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("dir %s: %v, want permission denied", dir, err)
		}
	}
	copyFile(t, "/bin/true", filepath.Join(private, "tool"), 0o755)
	for _, cmd := range []string{filepath.Join(private, "tool"), filepath.Join(private, "nothing")} {
		if err := CheckCommand(c, cmd, "", "/"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("cmd %s: %v, want permission denied", cmd, err)
		}
	}
	if err := CheckCommand(Cred{Groups: []uint32{}}, filepath.Join(private, "tool"), "", tr.home); err != nil {
		t.Errorf("as root: %v", err)
	}
}

// TestExitReportBounded: a status file of 1 TiB is an error, read no
// further than the bound.
func TestExitReportBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte(`{"code":0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 1<<40); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := ReadExitReport(path); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("err = %v", err)
		}
	})
	if allocs > 50 {
		t.Errorf("%v allocations", allocs)
	}
}

// TestCallerKeepsTreesProc: a caller's command sees only its own tree in
// /proc, and cannot take the tree's /proc away to reach the host's below
// it: unmounting needs a capability the caller's code does not hold.
func TestCallerKeepsTreesProc(t *testing.T) {
	tr := newTree(t)
	u := testutil.NewUser(t, "gsbox1", "gsbox")
	st, err := Start(ctx(t), tr.asUser(tr.spec("sh", "-c",
		`echo "pids $(ls /proc | grep -c '^[0-9]')"; umount /proc 2>/dev/null; echo "umount $?"; echo "pids $(ls /proc | grep -c '^[0-9]')"`), u))
	if err != nil {
		t.Fatal(err)
	}
	if r := tr.wait(st); r.Code == nil || *r.Code != 0 {
		t.Fatalf("report %+v, want code 0; log %q", r, tr.logText())
	}
	var before, umount, after int
	if _, err := fmt.Sscanf(tr.logText(), "pids %d\numount %d\npids %d\n", &before, &umount, &after); err != nil {
		t.Fatalf("log %q: %v", tr.logText(), err)
	}
	// The supervisor, sh, and the pipeline's subshell, ls and grep: a
	// handful (how many of them exist when ls reads /proc varies), where
	// the host's /proc lists every process of the machine.
	if before > 6 || after > 6 || umount == 0 {
		t.Fatalf("log %q: the command saw %d then %d processes, umount exited %d; want its tree's few, and umount refused", tr.logText(), before, after, umount)
	}
}
