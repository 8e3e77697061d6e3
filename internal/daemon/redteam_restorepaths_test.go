package daemon

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/treefiles"
	"github.com/gpusched/gpusched/pkg/api"
)

// reader prints the file it holds open, read from its start, every 50 ms,
// after each change of its content, as "read <content>".
const reader = `
import sys, time
f = open(sys.argv[1], sys.argv[2])
last = None
while True:
    f.seek(0)
    s = f.read()
    if s != last:
        print("read " + s, flush=True)
        last = s
    time.sleep(0.05)
`

// TestRedTeamRestorePathsPointedElsewhere: CRIU reopens, as root, the files
// a tree holds by the paths they had at its dump, checking only their size
// and mode. A real unprivileged user hibernates a process that holds a file
// of theirs open for reading and one for writing, then points both paths
// at root-only files of the same size and mode (a directory of theirs
// swapped for one of symlinks). The thaw must fail before the process runs,
// the process staying hibernated with its snapshot, and so must it for a
// snapshot without the record of its files (as one dumped before there
// were records); no byte of the secret reaches the user and the root file
// keeps its content. With the paths put back, the thaw goes through and
// the process reads its own file again.
func TestRedTeamRestorePathsPointedElsewhere(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3, which every user may run")
	}
	owner := testutil.NewUser(t, "gspath1", "gspath")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gspath" })

	home := filepath.Join(testutil.ShortDir(t), "home")
	work := filepath.Join(home, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	const secret, original = "TOP-SECRET root only 0123456789", "root's file, as it was written."
	rootDir := filepath.Join(testutil.ShortDir(t), "root-only")
	if err := os.Mkdir(rootDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secretPath, targetPath := filepath.Join(rootDir, "secret"), filepath.Join(rootDir, "target")
	// A file of root's in the daemon's own log directory, as root's own
	// process's log would be.
	rootLog := filepath.Join(h.cfg.LogDir, "rootlog.log")
	for path, content := range map[string]string{secretPath: secret, targetPath: original, rootLog: secret} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The owner's decoys: the size and mode of root's files (stat of a
	// file says both to anyone who may look it up).
	decoy := strings.Repeat("A", len(secret))
	for name, size := range map[string]int{"in": len(secret), "out": len(original), "x (deleted)": len(secret), "log": len(secret), "small": 5} {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("A", size)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(home, "reader.py")
	if err := os.WriteFile(script, []byte(reader), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (string, int) {
		t.Helper()
		out, errOut, code := h.ctlAs(owner, args...)
		return out + errOut, code
	}
	if out, code := ctl("run", "rd", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(work, "in"), "r"); code != 0 {
		t.Fatal(out)
	}
	if out, code := ctl("run", "wr", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(work, "out"), "r+"); code != 0 {
		t.Fatal(out)
	}
	// A file whose own name ends as /proc shows a deleted one's, and one
	// whose path will lead into the daemon's own directories.
	if out, code := ctl("run", "dl", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(work, "x (deleted)"), "r"); code != 0 {
		t.Fatal(out)
	}
	if out, code := ctl("run", "lg", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(work, "log"), "r"); code != 0 {
		t.Fatal(out)
	}
	// One whose decoy has not the size of root's file: CRIU's own check
	// refuses it, and its words must not tell the owner that size.
	if out, code := ctl("run", "sz", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(work, "small"), "r"); code != 0 {
		t.Fatal(out)
	}
	h.followCount("rd", "read "+decoy, 1)
	h.followCount("wr", "read AAAA", 1)
	h.followCount("dl", "read "+decoy, 1)
	h.followCount("lg", "read "+decoy, 1)
	h.followCount("sz", "read AAAAA", 1)
	names := []string{"rd", "wr", "dl", "lg", "sz"}
	for _, name := range names {
		if out, code := ctl("hibernate", name); code != 0 {
			t.Fatalf("hibernate %s: %s", name, out)
		}
	}

	// As the owner: the directory aside, one of symlinks in its place.
	kept := filepath.Join(home, "work.kept")
	if err := os.Rename(work, kept); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"in": secretPath, "out": targetPath, "x (deleted)": secretPath, "log": rootLog, "small": secretPath} {
		if err := os.Symlink(target, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		out, code := ctl("thaw", name)
		if code == 0 || !strings.Contains(out, "pointed elsewhere") || !strings.Contains(out, "(conflict)") ||
			strings.Contains(out, "bad size") || strings.Contains(out, "size "+strconv.Itoa(len(secret))) || strings.Contains(out, "(expect ") {
			t.Fatalf("thaw %s with its path pointed at root's file: exit %d: %s", name, code, out)
		}
		if p := h.proc(name); p.State != api.StateHibernated || p.Snapshot == "" {
			t.Fatalf("after the refused thaw %s is %s (snapshot %q)", name, p.State, p.Snapshot)
		}
	}
	// A snapshot without the record of its files nor its images' sums
	// (dumped before there were): what the restored process holds must be
	// what its owner may open as it holds it.
	for _, name := range names[:4] { // sz's restore CRIU refuses itself, as above
		for _, record := range []string{treefiles.FileName, checkpoint.SumsFile} {
			if err := os.Remove(filepath.Join(h.cfg.Snapshots(), h.proc(name).Snapshot, record)); err != nil {
				t.Fatal(err)
			}
		}
		out, code := ctl("thaw", name)
		if code == 0 || !strings.Contains(out, "which its owner may not read") || !strings.Contains(out, "(permission_denied)") {
			t.Fatalf("thaw %s of a snapshot without its record, its path pointed at root's file: exit %d: %s", name, code, out)
		}
	}
	for _, name := range []string{"rd", "dl", "lg"} {
		if logs := strings.Join(mustLogs(t, h, name), "\n"); strings.Contains(logs, "SECRET") {
			t.Fatalf("the secret reached %s's log:\n%s", name, logs)
		}
	}
	if b, err := os.ReadFile(targetPath); err != nil || string(b) != original {
		t.Fatalf("root's file now holds %q (%v)", b, err)
	}

	// The paths put back: the same thaws go through.
	if err := os.RemoveAll(work); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kept, work); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if out, code := ctl("thaw", name); code != 0 {
			t.Fatalf("thaw %s with its paths back: %s", name, out)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "in"), []byte(strings.Repeat("B", len(secret))), 0o600); err != nil {
		t.Fatal(err)
	}
	h.followCount("rd", "read BBBB", 1)

	// An image rewritten after the dump (as through a descriptor to it a
	// process might get): the restore refuses it, and takes it back as it
	// was.
	if out, code := ctl("hibernate", "rd"); code != 0 {
		t.Fatal(out)
	}
	cores, err := filepath.Glob(filepath.Join(h.cfg.Snapshots(), h.proc("rd").Snapshot, "core-*.img"))
	if err != nil || len(cores) == 0 {
		t.Fatalf("no core image: %v", err)
	}
	was, err := os.ReadFile(cores[0])
	if err != nil {
		t.Fatal(err)
	}
	changed := append([]byte(nil), was...)
	changed[len(changed)-1] ^= 1
	if err := os.WriteFile(cores[0], changed, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := ctl("thaw", "rd"); code == 0 || !strings.Contains(out, "changed since they were written") {
		t.Fatalf("thaw of a rewritten image: exit %d: %s", code, out)
	}
	if err := os.WriteFile(cores[0], was, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := ctl("thaw", "rd"); code != 0 {
		t.Fatalf("thaw of the image as it was: %s", out)
	}
}

// TestRedTeamDumpRefusesWhatARestoreWouldReopenUnseen: a tree whose restore
// would have CRIU, as root, reopen a path where no check of the restored
// tree can see the result is not dumped: descriptors in flight in a socket
// (SCM_RIGHTS; the process receives them once it runs), and a named pipe
// (CRIU writes what was queued in it through its path before the tree is
// checked), and a Unix socket bound to a path (CRIU unlinks whatever socket
// is at the path and binds the tree's there, as root: root's own socket,
// once the user pointed the path's directory at it). Nor is one connected
// to a listener outside the tree that has not accepted it, which no
// restore could connect again. The hibernate fails naming why; the
// process is not lost.
func TestRedTeamDumpRefusesWhatARestoreWouldReopenUnseen(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3, which every user may run")
	}
	owner := testutil.NewUser(t, "gspath2", "gspath")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gspath" })
	home := filepath.Join(testutil.ShortDir(t), "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(owner.UID), int(owner.GID)); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(testutil.ShortDir(t), "outside.sock")
	l, err := net.Listen("unix", outside) // never accepts
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"pathsock": `import os, socket, time
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(os.getcwd(), "s"))
s.listen()
print("ready", flush=True)
time.sleep(600)
`,
		"outside": `import socket, time
c = socket.socket(socket.AF_UNIX)
c.connect("` + outside + `")
print("ready", flush=True)
time.sleep(600)
`,
		"inflight": `import socket, time
a, b = socket.socketpair(socket.AF_UNIX)
f = open("/etc/hostname")
socket.send_fds(a, [b"x"], [f.fileno()])
f.close()
print("ready", flush=True)
time.sleep(600)
`,
		"fifo": `import os, time
p = os.path.join(os.getcwd(), "pipe")
os.mkfifo(p)
fd = os.open(p, os.O_RDWR)
os.write(fd, b"queued")
print("ready", flush=True)
time.sleep(600)
`,
	}
	for name, want := range map[string]string{"inflight": "in flight in a socket", "fifo": "named pipe",
		"pathsock": "bound to a path", "outside": "connected to one outside it"} {
		script := filepath.Join(home, name+".py")
		if err := os.WriteFile(script, []byte(scripts[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := h.ctlAs(owner, "run", name, "--dir", home, "--", "/usr/bin/python3", script); code != 0 {
			t.Fatal(errOut)
		}
		h.followCount(name, "ready", 1)
		_, errOut, code := h.ctlAs(owner, "hibernate", name)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Fatalf("hibernate %s: exit %d: %s", name, code, errOut)
		}
		if p := h.proc(name); p.State == api.StateHibernated || p.State == api.StateExited {
			t.Fatalf("after the refused hibernate %s is %s", name, p.State)
		}
	}
}

// TestRedTeamThawRefusesASocketPathOfAnOldSnapshot: a user's snapshot
// dumped before trees holding a socket bound to a path were refused (made
// here from one holding an abstract socket, its name rewritten to the path
// of root's listening socket and its sums and record removed, as a
// snapshot of then had none) is not restored: CRIU would unlink root's
// socket and bind the user's in its place, as root, before any check of
// the restored tree. The thaw is refused as a conflict, once: a refusal
// of what the tree holds is not retried by another way of restoring (a
// second restore of the same images would pass where the owner put the
// paths back meanwhile). Root's socket is the one it was; the process
// stays hibernated with its snapshot.
func TestRedTeamThawRefusesASocketPathOfAnOldSnapshot(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3, which every user may run")
	}
	owner := testutil.NewUser(t, "gspath3", "gspath")
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.CRIU, c.StreamRestore = "gspath", testutil.CRIU(t), true
	})
	core, warnings := observer.New(zap.WarnLevel)
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.begin()
	rootSock := filepath.Join(testutil.ShortDir(t), "root.sock")
	l, err := net.Listen("unix", rootSock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	was, err := os.Stat(rootSock)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(testutil.ShortDir(t), "abstract.py")
	if err := os.WriteFile(script, []byte(`import socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("\0gs-oldsnap-sock")
s.listen()
print("ready", flush=True)
time.sleep(600)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(owner, "run", "old", "--", "/usr/bin/python3", script); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("old", "ready", 1)
	if _, errOut, code := h.ctlAs(owner, "hibernate", "old"); code != 0 {
		t.Fatal(errOut)
	}
	snap := filepath.Join(h.cfg.Snapshots(), h.proc("old").Snapshot)
	renameSocket(t, filepath.Join(snap, "files.img"), "\x00gs-oldsnap-sock", rootSock)
	for _, record := range []string{treefiles.FileName, checkpoint.SumsFile} {
		if err := os.Remove(filepath.Join(snap, record)); err != nil {
			t.Fatal(err)
		}
	}
	_, errOut, code := h.ctlAs(owner, "thaw", "old")
	if code == 0 || !strings.Contains(errOut, "bound to a path") || !strings.Contains(errOut, "(conflict)") {
		t.Fatalf("thaw of an old snapshot binding root's socket path: exit %d: %s", code, errOut)
	}
	if now, err := os.Stat(rootSock); err != nil || !os.SameFile(was, now) {
		t.Fatalf("root's socket after the refused thaw: %v (the same: %v)", err, err == nil && os.SameFile(was, now))
	}
	if p := h.proc("old"); p.State != api.StateHibernated || p.Snapshot == "" {
		t.Fatalf("after the refused thaw old is %s (snapshot %q)", p.State, p.Snapshot)
	}
	if n := warnings.FilterMessage("restore from disk failed; the snapshot is kept").Len(); n != 1 {
		t.Fatalf("the refused thaw tried %d restores; want 1", n)
	}
}

// renameSocket rewrites the images' files.img so that the Unix socket
// bound to name is bound to to instead.
func renameSocket(t *testing.T, files, name, to string) {
	t.Helper()
	in, err := os.Open(files)
	if err != nil {
		t.Fatal(err)
	}
	img, err := crit.New(in, nil, "", false, false).Decode(&fdinfo.FileEntry{})
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range img.Entries {
		if fe, ok := e.Message.(*fdinfo.FileEntry); ok && fe.Usk != nil && string(fe.Usk.GetName()) == name {
			fe.Usk.Name, found = []byte(to), true
		}
	}
	if !found {
		t.Fatalf("no socket bound to %q in %s", name, files)
	}
	out, err := os.Create(files)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := crit.New(nil, out, "", false, false).Encode(img); err != nil {
		t.Fatal(err)
	}
}

// TestRedTeamThawMakesDeletedFilesAwayFromTheirPath: CRIU makes a file the
// tree held after deleting it again by its old path, as root, linking and
// unlinking there (red team H1: with a lease on CRIU's copy holding its
// open, an owner who then pointed the directory at one of root's had root
// unlink a file of root's by name, or leave theirs there). A real user's
// process holds a deleted file of theirs; after the hibernate its
// directory is swapped for a symlink to a root-only one holding a file of
// that name. The thaw goes through, the process reads its file's content,
// and nothing is made in, or removed from, root's directory.
func TestRedTeamThawMakesDeletedFilesAwayFromTheirPath(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3, which every user may run")
	}
	owner := testutil.NewUser(t, "gspath4", "gspath")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gspath" })
	home := filepath.Join(testutil.ShortDir(t), "home")
	d := filepath.Join(home, "d")
	for _, dir := range []string{home, d} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	rootDir := filepath.Join(testutil.ShortDir(t), "root-only")
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(rootDir, "victim")
	if err := os.WriteFile(rootFile, []byte("root's own"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(home, "deleted.py")
	if err := os.WriteFile(script, []byte(testutil.DeletedFileHolder), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(owner, "run", "del", "--dir", home, "--", "/usr/bin/python3", script, filepath.Join(d, "victim"), "the user's own"); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("del", "read the user's own", 1)
	if _, errOut, code := h.ctlAs(owner, "hibernate", "del"); code != 0 {
		t.Fatal(errOut)
	}
	if err := os.Rename(d, d+".kept"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rootDir, d); err != nil {
		t.Fatal(err)
	}
	seen := testutil.WatchDir(t, rootDir)
	if _, errOut, code := h.ctlAs(owner, "thaw", "del"); code != 0 {
		t.Fatalf("thaw: %s", errOut)
	}
	if names := seen(); len(names) > 0 {
		t.Fatalf("the thaw made or removed %v in root's directory, where the deleted file's path was pointed", names)
	}
	if b, err := os.ReadFile(rootFile); err != nil || string(b) != "root's own" {
		t.Fatalf("root's file: %q, %v", b, err)
	}
	if _, errOut, code := h.ctlAs(owner, "kill", "--signal", "USR1", "del"); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("del", "read the user's own", 2)
}

// TestRedTeamThawGivesSocketsBackToTheOwner: CRIU makes a restored tree's
// sockets as root's and binds them with SO_REUSEPORT on (red team H2: a
// user's listener, thawed while root's SO_REUSEPORT service listened on
// its port, took every connection meant for root's). A real user's
// listener is hibernated and root listens on its port with SO_REUSEPORT:
// the thaw is refused as a conflict naming the port before CRIU binds
// anything (the owner could hold CRIU's restore up with a lease, red team
// J3), and root's listener keeps its connections. With root's listener gone the thaw goes through
// and the listener is the user's (its uid in /proc/net/tcp; root's it
// was before).
func TestRedTeamThawGivesSocketsBackToTheOwner(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3, which every user may run")
	}
	owner := testutil.NewUser(t, "gspath5", "gspath")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gspath" })
	script := filepath.Join(testutil.ShortDir(t), "listen.py")
	if err := os.WriteFile(script, []byte(`import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print("port %d" % s.getsockname()[1], flush=True)
time.sleep(600)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(owner, "run", "srv", "--", "/usr/bin/python3", script); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("srv", "port ", 1)
	var port int
	for _, l := range mustLogs(t, h, "srv") {
		if p, ok := strings.CutPrefix(l, "port "); ok {
			port, _ = strconv.Atoi(strings.TrimSpace(p))
		}
	}
	if _, errOut, code := h.ctlAs(owner, "hibernate", "srv"); code != 0 {
		t.Fatal(errOut)
	}
	roots, _ := testutil.ReusePortListener(t, port)
	_, errOut, code := h.ctlAs(owner, "thaw", "srv")
	if code == 0 || !strings.Contains(errOut, "port "+strconv.Itoa(port)) || !strings.Contains(errOut, "a restore would bind") || !strings.Contains(errOut, "(conflict)") {
		t.Fatalf("thaw of a listener on the port of root's: exit %d: %s", code, errOut)
	}
	roots.Close()
	if _, errOut, code := h.ctlAs(owner, "thaw", "srv"); code != 0 {
		t.Fatalf("thaw with root's listener gone: %s", errOut)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	uid := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 9 && f[1] == fmt.Sprintf("0100007F:%04X", port) && f[3] == "0A" {
			uid = f[7]
		}
	}
	if uid != strconv.Itoa(int(owner.UID)) {
		t.Fatalf("the thawed listener's uid: %q, want the owner's %d", uid, owner.UID)
	}
}
