package daemon

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Issue 19, vector 5: every read the daemon makes of data a caller's code
// produces is bounded. Here the caller is a real unprivileged user, and
// what its process produces is its log.

// TestRedTeamReadsHugeLog: a user's process writes two million short lines,
// then a line of 200 MiB with no newline. Asked for every line, the daemon
// reads about the last MiB, answers with the one line there, cut, says
// truncated, and allocates a bounded amount; a follower reads as little
// and gets the same cut line when the process ends. Before the bounds, one
// such call read the whole log and allocated hundreds of MiB, and the
// reply held every short line.
func TestRedTeamReadsHugeLog(t *testing.T) {
	u := testutil.NewUser(t, "gsreads", "gsredteam")
	h := newHarness(t, func(c *config.Config) {
		c.Group = u.Group
		c.LogMaxBytes = 1 << 40 // rotation is another vector's
	})
	const size = 6 + 2*2000000 + 200<<20 + 4
	script := `$| = 1; print "start\n"; print "y\n" x 2000000; print "x" x (200 << 20); print "tail"; sleep 1000`
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "huge", "--", "perl", "-e", script); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	p, err := h.client().Process(ctxT(t), "huge")
	if err != nil {
		t.Fatal(err)
	}
	awaitLogSize(t, p.Log, size)

	// What a line from the end of the log is: its first MaxLine bytes read,
	// cut.
	cut := strings.Repeat("x", logfile.MaxLine) + logfile.CutMarker
	const (
		readBound  = 16 << 20 // the MiB of the log, and whatever else the daemon reads meanwhile
		allocBound = 64 << 20
		replyBound = 6*logfile.MaxTail + 4<<10 // were every byte escaped as \u0000
	)
	var out, errOut string
	var code int
	read, alloc := testutil.Cost(t, func() { out, errOut, code = h.ctlAs(u, "--json", "logs", "huge", "-n", "-1") })
	if code != 0 {
		t.Fatalf("logs: %s", errOut)
	}
	t.Logf("logs: the daemon read %d bytes and allocated %d; reply %d bytes", read, alloc, len(out))
	if read > readBound || alloc > allocBound || len(out) > replyBound {
		t.Errorf("logs: the daemon read %d bytes and allocated %d for a reply of %d; want at most %d, %d and %d",
			read, alloc, len(out), readBound, allocBound, replyBound)
	}
	var res api.LogsResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("logs --json: %v", err)
	}
	if !res.Truncated || len(res.Lines) != 1 || res.Lines[0] != cut {
		t.Errorf("logs = %d lines (the last %.20q), truncated %v; want the cut line alone, truncated", len(res.Lines), readsLast(res.Lines), res.Truncated)
	}
	if _, errOut, _ := h.ctlAs(u, "logs", "huge", "-n", "-1"); !strings.Contains(errOut, "left out") {
		t.Errorf("logs says nothing of the lines left out: %q", errOut)
	}

	var lines []string
	var supervisorRead uint64
	read, alloc = testutil.Cost(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		following := make(chan error, 1)
		go func() {
			following <- h.client().FollowLogs(ctx, "huge", -1, func(l string) error {
				lines = append(lines, l)
				return nil
			})
		}()
		// The follower ends when the process does; until then it waits
		// with the line in progress, not reading.
		time.Sleep(200 * time.Millisecond) // nothing to wait on; a follow that starts after the kill ends the same way
		// The supervisor copied the whole log through its pipe; once reaped,
		// what it read counts as this process's.
		supervisorRead = testutil.RChar(t, strconv.Itoa(p.InitPID))
		if _, errOut, code := h.ctlAs(u, "kill", "huge"); code != 0 {
			t.Errorf("kill: %s", errOut)
		}
		if err := <-following; err != nil {
			t.Errorf("follow: %v", err)
		}
	})
	read -= supervisorRead
	t.Logf("logs -f: the daemon read %d bytes and allocated %d", read, alloc)
	if read > readBound || alloc > allocBound {
		t.Errorf("logs -f: the daemon read %d bytes and allocated %d; want at most %d and %d", read, alloc, readBound, allocBound)
	}
	if len(lines) != 1 || lines[0] != cut {
		t.Errorf("logs -f = %d lines (the last %.20q); want the cut line alone", len(lines), readsLast(lines))
	}
}

func readsLast(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
