package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Issue 20: the records a user keeps (--max-procs-per-user live and
// --keep-finished exited, 756 by default) cost the daemon's memory a few
// KiB each, whatever their commands: each record keeps its command cut as
// listings cut it, and the whole one on disk. Before, records of 256 KiB
// commands held all of it: 200 of them took a daemon from 18 to 90 MiB
// of RSS, and one user's 756 would have held 189 MiB.

// TestRedTeamLongCommandsKeptOnDisk: a real user runs processes of 200 KiB
// commands; the daemon's live heap grows by little more than the cut
// commands, status and wait answer the whole command (after a restart
// too), a listing the cut one, and rm takes the whole one off the disk.
func TestRedTeamLongCommandsKeptOnDisk(t *testing.T) {
	u := testutil.NewUser(t, "gscmdmem", "gscmd")
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group })
	const procs = 48
	cmd := []string{"true", strings.Repeat("a", 100<<10), strings.Repeat("b", 100<<10)}
	names := make([]string, procs)
	before := liveHeap()
	for i := range names {
		names[i] = "long-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		if _, errOut, code := h.ctlAs(u, append([]string{"run", "--dir", "/", names[i], "--"}, cmd...)...); code != 0 {
			t.Fatalf("run %s: %s", names[i], errOut)
		}
	}
	waiter := h.client() // one client: each of the harness's holds a buffer of its own
	for _, name := range names {
		if _, err := waiter.Wait(ctxT(t), api.WaitParams{Name: name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A record with its command cut at 4 KiB, its runtime's and its
	// events' share: far below the 200 KiB of a command kept whole
	// (9.6 MiB for the 48).
	const perProc = 32 << 10
	grown := int64(liveHeap()) - int64(before)
	t.Logf("%d records of %d KiB commands: the daemon's live heap grew by %d bytes", procs, 200, grown)
	if grown > procs*perProc {
		t.Errorf("%d records of 200 KiB commands grew the live heap by %d bytes, want at most %d", procs, grown, procs*perProc)
	}

	whole := func(what string) {
		t.Helper()
		p, err := h.client().Process(ctxT(t), names[0])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Cmd, cmd) || p.CmdTruncated {
			t.Errorf("status of one, %s: %d arguments, truncated %v; want the whole command", what, len(p.Cmd), p.CmdTruncated)
		}
	}
	whole("as run")
	r := h.rawAsUser(u).call(api.MethodWait, api.WaitParams{Name: names[1]})
	var waited api.Process
	b, _ := json.Marshal(r["result"])
	if err := json.Unmarshal(b, &waited); err != nil || !slices.Equal(waited.Cmd, cmd) {
		t.Errorf("wait of an exited process: %d arguments (%v); want the whole command", len(waited.Cmd), err)
	}
	ps, err := h.client().PS(ctxT(t), api.PSParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if b, _ := json.Marshal(p.Cmd); !p.CmdTruncated || len(b) > proctable.KeptCmdBytes {
			t.Fatalf("ps lists %s with a command of %d bytes, truncated %v", p.Name, len(b), p.CmdTruncated)
		}
	}
	h.stop()
	h.start()
	whole("after a restart")

	kept := filepath.Join(h.cfg.StateDir, "procs", "cmds")
	if ents, _ := os.ReadDir(kept); len(ents) != procs {
		t.Fatalf("%d whole commands kept on disk, want %d", len(ents), procs)
	}
	if _, err := h.client().Remove(ctxT(t), api.RmParams{Exited: true}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(kept); len(ents) != 0 {
		t.Errorf("%d whole commands left on disk after rm --exited", len(ents))
	}
}
