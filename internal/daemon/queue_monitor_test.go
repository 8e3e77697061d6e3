package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQueueWarnsPastDeclarationAndLearns: a job that goes past its
// declaration is warned about at once (an event with a warning), gets an
// under-declared verdict, and what it used becomes the declaration of the
// next vram=auto run of the same command, before and after a restart.
func TestQueueWarnsPastDeclarationAndLearns(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	cmd := h.simjob("--vram", "2048", "--hold", "0.2")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	subscribed := make(chan struct{})
	warnings := make(chan string, 4)
	streamed := make(chan error, 1)
	go func() {
		streamed <- h.client().Events(ctx, api.EventsParams{Name: "greedy"}, func(e *api.Event) error {
			switch {
			case e.Type == api.EventSubscribed:
				close(subscribed)
			case e.Warning != "":
				warnings <- e.Warning
			case e.JobState.Terminal():
				return errDone
			}
			return nil
		})
	}()
	<-subscribed
	h.submit(api.JobSpec{Name: "greedy", Cmd: cmd, VRAM: gib(1)})
	if err := <-streamed; !errors.Is(err, errDone) {
		t.Fatal(err)
	}
	select {
	case w := <-warnings:
		if !strings.Contains(w, "2048 MiB") || !strings.Contains(w, "past its 1024 MiB declaration") {
			t.Fatalf("warning: %q", w)
		}
	default:
		t.Fatal("no warning event before the job ended")
	}
	j := h.job("greedy")
	if j.State != api.JobDone || !strings.HasPrefix(j.Verdict, "under-declared") || j.Attempts[0].PeakMiB[j.Attempts[0].GPUs[0]] != 2048 {
		t.Fatalf("greedy: %s verdict %q peaks %v", j.State, j.Verdict, j.Attempts[0].PeakMiB)
	}

	if a := h.submit(api.JobSpec{Name: "again", Cmd: cmd, VRAM: api.VRAM{Auto: true}}); a.VRAMMiB != 2048 || !a.VRAM.Auto {
		t.Fatalf("auto after a run: vram %v = %d MiB", a.VRAM, a.VRAMMiB)
	}
	h.stop() // what was learned is written by a clean stop at the latest
	h.start()
	if a := h.submit(api.JobSpec{Name: "after-restart", Cmd: cmd, VRAM: api.VRAM{Auto: true}}); a.VRAMMiB != 2048 {
		t.Fatalf("auto after a restart: %d MiB, want the 2048 learned before it", a.VRAMMiB)
	}
	if n := h.submit(api.JobSpec{Name: "new", Cmd: h.simjob("--vram", "64", "--hold", "0.01"), VRAM: api.VRAM{Auto: true}}); n.VRAMMiB != 0 {
		t.Fatalf("auto for a new command: %d MiB, want undeclared", n.VRAMMiB)
	}
}

var errDone = errors.New("done")

// TestQueueNonRoot: a non-root user's job runs as that user; it cannot
// see, cancel or wait for root's jobs, nor release root's leases; its
// jobs never preempt another user's.
func TestQueueNonRoot(t *testing.T) {
	nobody, group := nobodyUser(t)
	h := newQueueHarness(t, "1x24G", func(c *config.Config) { c.Group = group.Name })
	h.submit(api.JobSpec{Name: "rootjob", Cmd: h.simjob("--vram", "16384"), VRAM: gib(16), Preemptible: true})
	h.waitRunning("rootjob")
	lease, err := h.client().Acquire(ctxT(t), api.AcquireParams{MinFree: gib(1)})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := h.asUser(nobody, "--json", "jobs", "--all")
	var jobs api.JobsResult
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs.Jobs) != 0 {
		t.Fatalf("jobs as nobody: %q %q (exit %d)", out, errOut, code)
	}
	for _, args := range [][]string{{"job", "root/rootjob"}, {"cancel", "root/rootjob"}, {"job", "wait", "root/rootjob"}, {"job", "j1"}, {"release", lease.ID}} {
		if _, stderr, code := h.asUser(nobody, args...); code == 0 || !strings.Contains(stderr, string(api.CodePermissionDenied)) {
			t.Fatalf("%v as nobody: exit %d, %q; want permission_denied", args, code, stderr)
		}
	}
	if _, stderr, code := h.asUser(nobody, "submit", "--name", "mine", "--vram", "16G", "--priority", "9", "--dir", "/", "--",
		"sh", "-c", "id -u; exec "+h.bins.SimJob+" --vram 16384"); code != 0 {
		t.Fatalf("submit as nobody: %q", stderr)
	}
	h.submit(api.JobSpec{Name: "probe", Cmd: h.simjob("--vram", "64"), VRAM: api.VRAM{MiB: 64}})
	h.waitRunning("probe")
	if j := h.job("mine"); j.State != api.JobQueued || h.job("rootjob").State != api.JobRunning {
		t.Fatalf("nobody's priority-9 job beside root's preemptible one: %s (%q), root's %s", j.State, j.Reason, h.job("rootjob").State)
	}
	if _, err := h.client().Cancel(ctxT(t), "rootjob"); err != nil {
		t.Fatal(err)
	}
	h.waitRunning("mine")
	h.followCount("mine", nobody.Uid, 1)
	if p := h.proc("mine"); p.UID != mustAtoi(t, nobody.Uid) {
		t.Fatalf("nobody's job runs as uid %d", p.UID)
	}
}

func mustAtoi(t *testing.T, s string) uint32 {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// TestBootMovesABadLearnedFileAside: a file of learned declarations that
// does not decode is moved aside and the daemon starts with nothing
// learned. Before, it refused to start.
func TestBootMovesABadLearnedFileAside(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	h.stop()
	path := filepath.Join(h.cfg.StateDir, "learned.json")
	if err := os.WriteFile(path, []byte(`{"1000`), 0o600); err != nil {
		t.Fatal(err)
	}
	h.start()
	aside, _ := filepath.Glob(path + ".bad-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v, want the one bad file", aside)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || string(b) != `{"1000` {
		t.Fatalf("what was moved aside: %q (%v)", b, err)
	}
	if n := h.submit(api.JobSpec{Name: "auto", Cmd: h.simjob("--vram", "64", "--hold", "0.01"), VRAM: api.VRAM{Auto: true}}); n.VRAMMiB != 0 {
		t.Fatalf("auto with nothing learned: %d MiB, want undeclared", n.VRAMMiB)
	}
}
