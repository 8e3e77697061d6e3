package daemon

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The red-team tests of name collisions (issue 19): two real unprivileged
// users of the socket's group, where one tries to take over, through a
// name, what is the other's.
const (
	rtGroup = "gsrtnames"   // the socket's group
	rtAlice = "gsrtnames-a" // the victim
	rtBob   = "gsrtnames-b" // the attacker
)

// mustCtl runs gpuschedctl as u and fails t unless it succeeds.
func (h *harness) mustCtl(u testutil.User, args ...string) string {
	h.t.Helper()
	out, stderr, code := h.ctlAs(u, args...)
	if code != 0 {
		h.t.Fatalf("gpuschedctl %v as %s: exit %d: %s", args, u.Name, code, stderr)
	}
	return out
}

// held is what a user holds under one name: the record, the log and its
// rotated copy (contents and inode), and whether the status file exists.
type held struct {
	rec              proctable.Record
	log, rotated     string
	logIno, rotIno   uint64
	status           bool
	rotatedPath, who string
}

// holding reads what the first user of name holds now; it fails t when
// there is no record.
func (h *harness) holding(name string) held {
	h.t.Helper()
	named := h.d.table.View().Named(name)
	if len(named) == 0 {
		h.t.Fatalf("no record %q", name)
	}
	return h.holdingOf(named[0].Key())
}

// holdingOf reads what k holds now; it fails t when there is no record.
func (h *harness) holdingOf(k proctable.Key) held {
	h.t.Helper()
	rec, ok := h.d.table.Get(k)
	if !ok {
		h.t.Fatalf("no record %q of uid %d", k.Name, k.UID)
	}
	out := held{rec: rec, rotatedPath: rec.LogPath + ".1", who: rec.Owner.User}
	out.log, out.logIno = fileAndInode(h.t, rec.LogPath)
	out.rotated, out.rotIno = fileAndInode(h.t, out.rotatedPath)
	_, err := os.Stat(rec.StatusPath)
	out.status = err == nil
	return out
}

// intact checks that name still holds exactly what before recorded.
func (h *harness) intact(before held) {
	h.t.Helper()
	name := before.rec.Name
	now := h.holdingOf(before.rec.Key())
	switch r, b := now.rec, before.rec; {
	case r.ID != b.ID, r.Owner.UID != b.Owner.UID, r.State != b.State, r.PID != b.PID, r.LogPath != b.LogPath:
		h.t.Errorf("%s's record %q was replaced or changed: was %s %s pid %d uid %d, now %s %s pid %d uid %d",
			before.who, name, b.ID, b.State, b.PID, b.Owner.UID, r.ID, r.State, r.PID, r.Owner.UID)
	}
	if now.log != before.log || now.logIno != before.logIno {
		h.t.Errorf("%s's log %s was replaced: was %q (inode %d), now %q (inode %d)", before.who, before.rec.LogPath, before.log, before.logIno, now.log, now.logIno)
	}
	if now.rotated != before.rotated || now.rotIno != before.rotIno {
		h.t.Errorf("%s's rotated log %s was replaced: was %q, now %q", before.who, before.rotatedPath, before.rotated, now.rotated)
	}
	if now.status != before.status {
		h.t.Errorf("%s's status file %s: existed %v, now %v", before.who, before.rec.StatusPath, before.status, now.status)
	}
}

// fileAndInode returns a file's contents and inode; a missing file is
// empty, inode 0.
func fileAndInode(t testing.TB, path string) (string, uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return string(b), st.Ino
}

// TestRedTeamNamesArePerUser: process names are per user. Bob uses the
// name of alice's exited process every way that creates or removes a
// record (run, a job, run by root on his behalf, rm): each acts on a
// process of his own, and alice's record, log, rotated log and status
// file are as they were. Root names either as USER/NAME; the name alone
// is refused as ambiguous, naming both users.
func TestRedTeamNamesArePerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, rtAlice, rtGroup), testutil.NewUser(t, rtBob, rtGroup)
	h := newQueueHarness(t, "1x4G", func(c *config.Config) { c.Group = rtGroup })
	h.mustCtl(alice, "run", "--dir", "/", "share-1", "--", "sh", "-c", "echo alice-secret")
	if p := h.waitExit("share-1"); p.UID != alice.UID {
		t.Fatalf("share-1 runs as %d, want alice (%d)", p.UID, alice.UID)
	}
	first, _ := h.record("share-1")
	if err := os.WriteFile(first.LogPath+".1", []byte("alice-rotated\n"), 0o600); err != nil { // as rotation leaves it
		t.Fatal(err)
	}
	before := h.holding("share-1")
	if before.log != "alice-secret\n" || !before.status {
		t.Fatalf("alice's share-1: log %q, status file %v", before.log, before.status)
	}
	bobs := bob.Name + "/share-1"
	bobsRecord := func(what string) proctable.Record {
		t.Helper()
		r, ok := h.d.table.Get(proctable.Key{UID: bob.UID, Name: "share-1"})
		if !ok {
			t.Fatalf("%s: bob has no share-1", what)
		}
		return r
	}

	h.mustCtl(bob, "run", "--dir", "/", "share-1", "--", "sh", "-c", "echo bob-output")
	if p := h.waitExit(bobs); p.UID != bob.UID {
		t.Fatalf("bob's share-1 runs as %d", p.UID)
	}
	h.intact(before)
	if r := bobsRecord("run"); r.LogPath == before.rec.LogPath || r.StatusPath == before.rec.StatusPath {
		t.Errorf("bob's share-1 shares alice's files: log %s, status %s", r.LogPath, r.StatusPath)
	}
	if out := h.mustCtl(bob, "logs", "share-1"); out != "bob-output\n" {
		t.Errorf("bob's logs share-1: %q", out)
	}
	h.mustCtl(bob, "rm", "share-1")
	if _, ok := h.d.table.Get(proctable.Key{UID: bob.UID, Name: "share-1"}); ok {
		t.Error("bob's rm share-1 left his record")
	}
	h.intact(before)

	h.mustCtl(bob, "submit", "--name", "share-1", "--dir", "/", "--", "sh", "-c", "echo bob-job")
	if j := h.waitJob("share-1"); j.State != api.JobDone || j.UID != bob.UID {
		t.Errorf("bob's job share-1: %s (uid %d) %q; want done, his", j.State, j.UID, j.Reason)
	}
	if r := bobsRecord("submit"); r.Job == "" {
		t.Errorf("bob's share-1 after his job: %+v; want the job's process", r)
	}
	h.intact(before)
	h.mustCtl(bob, "rm", "share-1")

	// Root running a process as bob makes bob's, too.
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "share-1", User: bob.Name, Dir: "/", Cmd: []string{"sleep", "1000"},
		Env: map[string]string{"PATH": "/usr/bin:/bin"}}); err != nil {
		t.Fatalf("root's run of share-1 as bob: %v", err)
	}
	if r := bobsRecord("root's run"); r.Owner.UID != bob.UID || !r.Live() {
		t.Errorf("root's run of share-1 as bob: %+v", r)
	}
	h.intact(before)

	_, err := h.client().Process(ctxT(t), "share-1")
	if !api.IsInvalidArgument(err) || !strings.Contains(err.Error(), alice.Name) || !strings.Contains(err.Error(), bob.Name) {
		t.Errorf("root's status share-1 with two users' share-1: %v; want invalid_argument naming both", err)
	}
	for _, u := range []testutil.User{alice, bob} {
		for _, ref := range []string{u.Name + "/share-1", strconv.Itoa(int(u.UID)) + "/share-1"} {
			if p, err := h.client().Process(ctxT(t), ref); err != nil || p.UID != u.UID {
				t.Errorf("root's status %s: %+v %v", ref, p, err)
			}
		}
	}
	if _, stderr, code := h.ctlAs(bob, "status", alice.Name+"/share-1"); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
		t.Errorf("bob's status of alice's share-1: exit %d %q; want permission_denied", code, stderr)
	}
	if out := h.mustCtl(alice, "logs", "share-1"); out != "alice-rotated\nalice-secret\n" {
		t.Errorf("alice's logs share-1: %q", out)
	}
	h.mustCtl(alice, "rm", "share-1")
	if _, err := h.client().Process(ctxT(t), "share-1"); err != nil {
		t.Errorf("root's status share-1 once bob's alone holds it: %v", err)
	}
}

// TestRedTeamNamesLaunchOverLiveProcess: bob's job waits for memory; alice
// meanwhile runs a process under the job's name. When the job is placed
// it starts as bob's own process of that name, and alice's live process,
// its record and its log are untouched.
func TestRedTeamNamesLaunchOverLiveProcess(t *testing.T) {
	alice, bob := testutil.NewUser(t, rtAlice, rtGroup), testutil.NewUser(t, rtBob, rtGroup)
	h := newQueueHarness(t, "1x4G", func(c *config.Config) { c.Group = rtGroup })
	h.submit(api.JobSpec{Name: "blocker", Cmd: h.simjob("--vram", "3072"), VRAM: gib(3)})
	h.waitRunning("blocker")
	h.mustCtl(bob, "submit", "--name", "late", "--vram", "3G", "--dir", "/", "--", "sh", "-c", "echo bob-job; exec sleep 1000")
	if j := h.job("late"); j.State != api.JobQueued || j.UID != bob.UID {
		t.Fatalf("bob's job late: %s uid %d, want queued for bob", j.State, j.UID)
	}
	h.mustCtl(alice, "run", "--dir", "/", "late", "--", "sh", "-c", "echo alice-live; exec sleep 1000")
	h.followUntil(alice.Name+"/late", "alice-live")
	before := h.holding("late")

	if _, err := h.client().Cancel(ctxT(t), "blocker"); err != nil {
		t.Fatal(err)
	}
	if j := h.waitJobState("late", api.JobRunning); j.UID != bob.UID {
		t.Errorf("bob's job after placement: %s %q (uid %d); want running, his", j.State, j.Reason, j.UID)
	}
	h.followUntil(bob.Name+"/late", "bob-job")
	h.intact(before)
	if p, err := h.client().Process(ctxT(t), alice.Name+"/late"); err != nil || p.State != api.StateRunning || p.UID != alice.UID {
		t.Errorf("alice's late: %+v %v", p, err)
	}
}

// TestRedTeamNamesJobVsJob: job names are per user too. Bob's unfinished
// job does not keep alice from a job of that name: each runs as its own
// user's process, each user finds and cancels their own, and root names
// either as USER/NAME (the name alone is ambiguous). A user's second
// unfinished job of a name is refused as before.
func TestRedTeamNamesJobVsJob(t *testing.T) {
	alice, bob := testutil.NewUser(t, rtAlice, rtGroup), testutil.NewUser(t, rtBob, rtGroup)
	h := newQueueHarness(t, "1x4G", func(c *config.Config) { c.Group = rtGroup })
	h.mustCtl(bob, "submit", "--name", "sweep", "--vram", "1G", "--dir", "/", "--", "sleep", "1000")
	h.mustCtl(alice, "submit", "--name", "sweep", "--vram", "1G", "--dir", "/", "--", "sleep", "1000")
	if _, stderr, code := h.ctlAs(alice, "submit", "--name", "sweep", "--dir", "/", "--", "true"); code == 0 || !strings.Contains(stderr, string(api.CodeExists)) {
		t.Errorf("alice's second unfinished sweep: exit %d %q; want exists", code, stderr)
	}
	for _, u := range []testutil.User{alice, bob} {
		var j api.Job
		if out := h.mustCtl(u, "--json", "job", "sweep"); json.Unmarshal([]byte(out), &j) != nil || j.UID != u.UID {
			t.Errorf("%s's job sweep: %s", u.Name, out)
		}
		if j, err := h.client().Job(ctxT(t), u.Name+"/sweep"); err != nil || j.UID != u.UID {
			t.Errorf("root's job %s/sweep: %+v %v", u.Name, j, err)
		}
	}
	if _, err := h.client().Job(ctxT(t), "sweep"); !api.IsInvalidArgument(err) || !strings.Contains(err.Error(), alice.Name) || !strings.Contains(err.Error(), bob.Name) {
		t.Errorf("root's job sweep with two users' sweep: %v; want invalid_argument naming both", err)
	}
	if _, stderr, code := h.ctlAs(alice, "job", "cancel", bob.Name+"/sweep"); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
		t.Errorf("alice's cancel of bob's sweep: exit %d %q; want permission_denied", code, stderr)
	}
	h.waitJobState(bob.Name+"/sweep", api.JobRunning)
	h.waitJobState(alice.Name+"/sweep", api.JobRunning)
	h.mustCtl(bob, "job", "cancel", "sweep")
	if j := h.waitJob(bob.Name + "/sweep"); j.State != api.JobCancelled || j.UID != bob.UID {
		t.Errorf("bob's sweep after his cancel: %s (uid %d)", j.State, j.UID)
	}
	if j := h.job(alice.Name + "/sweep"); j.State != api.JobRunning {
		t.Errorf("alice's sweep after bob cancelled his: %s", j.State)
	}
}

// TestRedTeamRunAsOwnUIDKeepsDroppedGroups: a caller that dropped a
// supplementary group and names its own uid as user gets exactly its own
// credentials, not the groups /etc/group lists for it.
func TestRedTeamRunAsOwnUIDKeepsDroppedGroups(t *testing.T) {
	alice := testutil.NewUser(t, rtAlice, rtGroup)
	dropped := testutil.NewUser(t, rtAlice, rtGroup+"-x") // alice is also in rtGroup-x
	h := newHarness(t, func(c *config.Config) { c.Group = rtGroup })
	for i, user := range []string{strconv.Itoa(int(alice.UID)), alice.Name} {
		name := "dropped-" + strconv.Itoa(i)
		_, stderr, code := h.ctlWith(alice, []uint32{alice.GroupGID}, "", "run", "--user", user, "--dir", "/", name, "--", "sleep", "1000")
		if code != 0 {
			t.Fatalf("run --user %s as alice: %s", user, stderr)
		}
		p, err := h.client().Process(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{p.InitPID, p.PID} {
			groups := procGroups(t, pid)
			if slices.Contains(groups, dropped.GroupGID) || !slices.Contains(groups, alice.GroupGID) {
				t.Errorf("run --user %s: pid %d has groups %v; want %d kept and the dropped %d absent", user, pid, groups, alice.GroupGID, dropped.GroupGID)
			}
		}
	}
}

// procGroups returns the Groups: line of /proc/pid/status.
func procGroups(t *testing.T, pid int) []uint32 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Groups:"); ok {
			out := []uint32{}
			for _, f := range strings.Fields(v) {
				g, _ := strconv.ParseUint(f, 10, 32)
				out = append(out, uint32(g))
			}
			return out
		}
	}
	t.Fatalf("pid %d: no Groups line", pid)
	return nil
}

// TestRedTeamNamesFillerLog: a process named filler-N never shares a log
// with the root filler helper on GPU N, whichever starts first: the
// helper's log keeps what the helper wrote, and the user reads only its
// own output.
func TestRedTeamNamesFillerLog(t *testing.T) {
	bob := testutil.NewUser(t, rtBob, rtGroup)
	h := newQueueHarness(t, "2x4G", func(c *config.Config) { c.Group = rtGroup })
	helperLog := func(index int) string {
		return h.d.fillerOptions(h.d.gpuView().devices[index].UUID, index).LogPath
	}
	fill := func(index int) {
		if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: index}, MiB: api.VRAM{MiB: 512}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			b, _ := os.ReadFile(helperLog(index))
			return strings.Contains(string(b), "started:")
		})
	}
	// The helper first, then bob's process of that name.
	fill(0)
	h.mustCtl(bob, "run", "--dir", "/", "filler-0", "--", "sh", "-c", "echo bob-output; exec sleep 1000")
	h.followUntil("filler-0", "bob-output")
	// Bob's process first, then the helper.
	h.mustCtl(bob, "run", "--dir", "/", "filler-1", "--", "sh", "-c", "echo bob-output; exec sleep 1000")
	h.followUntil("filler-1", "bob-output")
	fill(1)
	for i := range 2 {
		b, _ := os.ReadFile(helperLog(i))
		if log := string(b); !strings.Contains(log, "started:") || strings.Contains(log, "bob-output") {
			t.Errorf("filler %d's helper log %s: %q; want the helper's lines only", i, helperLog(i), log)
		}
		name := "filler-" + strconv.Itoa(i)
		if out := h.mustCtl(bob, "logs", name); out != "bob-output\n" {
			t.Errorf("bob's logs %s: %q; want only bob's output", name, out)
		}
	}
}
