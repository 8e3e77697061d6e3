package daemon

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/threadprio"
)

// TestBulkWorkRunsAtBackgroundPriority: a user's `logs` of every line of a
// long log (bulk work) runs on a thread lowered to nice 19, so that the
// daemon's next request and its network poller run ahead of it on its
// CPU; once it is done no thread of the daemon is left lowered.
func TestBulkWorkRunsAtBackgroundPriority(t *testing.T) {
	u := testutil.NewUser(t, "gsbprio", "gsbulkprio")
	h := prepareHarness(t, func(c *config.Config) { c.Group = u.Group })
	h.start()
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "newlines", "--", "perl", "-e", `$| = 1; print "\n" x (8 << 20); print "done\n"; sleep 1000`); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if out, _, _ := h.ctlAs(u, "logs", "newlines", "-n", "1"); strings.Contains(out, "done") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the log never ended with done")
		}
	}
	for _, n := range threadNices(t, os.Getpid()) {
		if n == threadprio.Background {
			t.Skipf("a thread of the test process is at nice %d already", n)
		}
	}

	ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	reads := make(chan error, 1)
	go func() { // every line, again and again, until a lowered thread is seen
		for ctx.Err() == nil {
			if _, errOut, code := h.ctlAs(u, "logs", "newlines", "-n", "-1"); code != 0 && ctx.Err() == nil {
				reads <- os.ErrInvalid
				t.Errorf("logs: %s", errOut)
				return
			}
		}
		reads <- nil
	}()
	seen := false
	for !seen && ctx.Err() == nil {
		for _, n := range threadNices(t, os.Getpid()) {
			seen = seen || n == threadprio.Background
		}
		time.Sleep(time.Millisecond) // a thread's priority has no event to wait for
	}
	cancel()
	<-reads
	if !seen {
		t.Fatalf("no thread at nice %d while a user's logs read every line of a long log, for a minute", threadprio.Background)
	}
	for tid, n := range threadNices(t, os.Getpid()) {
		if n == threadprio.Background {
			t.Errorf("thread %d still at nice %d once the reads ended", tid, n)
		}
	}
}
