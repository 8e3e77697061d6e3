package daemon

import (
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Issue 20: what one `logs` call costs the daemon in memory is bounded by
// a small constant, whatever the log holds, and so is what a connection
// keeps once the call is answered.

// TestRedTeamLogsMemory: a user's process writes 60 MiB of newlines.
// Four concurrent `logs -n -1` as that user get the last MaxTailLines
// lines each, with truncated, and the daemon allocates a few MiB a call.
// Before the line cap, the MiB each call reads was a million empty lines,
// and the four calls allocated 160 MiB (240 under the race detector).
//
// Then a log of MiB of control bytes, which JSON escapes to six bytes
// each: four connections that asked for it and stay open hold next to
// nothing once answered. Before, each kept its largest reply's buffer.
func TestRedTeamLogsMemory(t *testing.T) {
	u := testutil.NewUser(t, "gsstrmem", "gsstr")
	h := newHarness(t, func(c *config.Config) {
		c.Group = u.Group
		c.LogMaxBytes = 1 << 40 // rotation is not what this tests
	})
	for name, script := range map[string]string{
		"newlines": `print "\n" x (60 << 20)`,
		"control":  `print(("\x01" x 65535) . "\n") for 1 .. 16`, // 1 MiB in lines of MaxLine bytes
	} {
		if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", name, "--", "perl", "-e", script); code != 0 {
			t.Fatalf("run %s: %s", name, errOut)
		}
		if p := h.waitExit(name); p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
			t.Fatalf("%s ended %+v", name, p)
		}
	}

	const callers = 4
	// 8 MiB a call: the lines' headers (1 MiB), buffers, the reply (about
	// 4 MiB in all under the race detector), and what the daemon allocates
	// meanwhile; far below what a million lines took.
	const allocBound = callers * 8 << 20
	outs := make([]string, callers)
	var wg sync.WaitGroup
	_, alloc := testutil.Cost(t, func() {
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var errOut string
				var code int
				if outs[i], errOut, code = h.ctlAs(u, "--json", "logs", "newlines", "-n", "-1"); code != 0 {
					t.Errorf("logs: %s", errOut)
				}
			}()
		}
		wg.Wait()
	})
	t.Logf("%d concurrent logs -n -1 of 60 MiB of newlines: the daemon allocated %d bytes", callers, alloc)
	if alloc > allocBound {
		t.Errorf("%d concurrent logs -n -1 allocated %d bytes in the daemon, want at most %d", callers, alloc, allocBound)
	}
	for _, out := range outs {
		var res api.LogsResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("logs --json: %v", err)
		}
		if len(res.Lines) != logfile.MaxTailLines || !res.Truncated {
			t.Errorf("logs -n -1 = %d lines, truncated %v; want %d, truncated", len(res.Lines), res.Truncated, logfile.MaxTailLines)
		}
	}
	if _, errOut, _ := h.ctlAs(u, "logs", "newlines", "-n", "-1"); !strings.Contains(errOut, "left out") {
		t.Errorf("logs says nothing of the lines left out: %q", errOut)
	}

	before := liveHeap()
	for _, rc := range h.rawsAsUser(u, callers) {
		resp := rc.call(api.MethodLogs, map[string]any{"name": "control", "lines": -1})
		if lines, _ := resp["result"].(map[string]any)["lines"].([]any); len(lines) != 16 {
			t.Fatalf("logs of control bytes = %.200v, want 16 lines", resp)
		}
	}
	// Each reply was about 6 MiB on the wire; the connections, still open,
	// may keep a small buffer each, no reply.
	const keptBound = 4 << 20
	kept := int64(liveHeap()) - int64(before)
	t.Logf("%d open connections answered replies of 6 MiB each: the live heap grew by %d bytes", callers, kept)
	if kept > keptBound {
		t.Errorf("%d open connections answered keep %d bytes of heap, want at most %d", callers, kept, keptBound)
	}
}

// liveHeap is the bytes of live heap objects, once garbage (and what sync
// pools hold, which two collections drop) is collected.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
