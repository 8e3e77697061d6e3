package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestStrayFillerHelperReleasedAtStart is a daemon that died between
// starting a filler's helper and saving its record (as the crash test
// found): the next daemon releases the helper no record names instead of
// leaving it holding GPU memory until its orphan timeout.
func TestStrayFillerHelperReleasedAtStart(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Sim = fillGPU })
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 4096)
	start, err := procfs.StartTime(f.PID)
	if err != nil {
		t.Fatal(err)
	}
	h.stop() // the helper stays, holding, for the next daemon
	recs, err := filepath.Glob(filepath.Join(h.cfg.StateDir, "fillers", "*.json"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("filler records %v, %v; want one", recs, err)
	}
	if err := os.Remove(recs[0]); err != nil {
		t.Fatal(err)
	}

	h.begin()
	h.helperGone(f.PID, start)
	if u := h.used(0); u != 0 {
		t.Fatalf("GPU 0 holds %d MiB after the stray helper went", u)
	}
	if fs, err := h.client().Fillers(ctxT(t)); err != nil || len(fs) != 0 {
		t.Fatalf("fillers %+v, %v; want none", fs, err)
	}
}

// editRecords rewrites each saved process record in dir (the daemon
// stopped) through edit, which removes the record by returning false; it
// returns how many records there were.
func editRecords(t *testing.T, dir string, edit func(m map[string]any) (keep bool)) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // numbers are written back as they were
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if !edit(m) {
			err = os.Remove(f)
		} else if b, err = json.Marshal(m); err == nil {
			err = os.WriteFile(f, b, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return len(files)
}

// editRecord rewrites the saved record of process name through edit; it
// returns false when there is none.
func editRecord(t *testing.T, h *harness, name string, edit func(m map[string]any) (keep bool)) bool {
	t.Helper()
	found := false
	editRecords(t, filepath.Join(h.cfg.StateDir, "procs"), func(m map[string]any) bool {
		if m["name"] != name {
			return true
		}
		found = true
		return edit(m)
	})
	return found
}

// TestUntrackedTreeKilledAtStart is a daemon killed between starting a
// tree and recording it (a run, a restore, a fork copy): the next daemon
// kills the tree no record tracks and leaves tracked ones alone.
func TestUntrackedTreeKilledAtStart(t *testing.T) {
	h := newHarness(t)
	lost := h.run("lost", "sleep", "1000")
	kept := h.run("kept", "sleep", "1000")
	h.stop()
	if !editRecord(t, h, "lost", func(map[string]any) bool { return false }) {
		t.Fatal("no record of lost")
	}
	h.start()
	waitPidExit(t, lost.InitPID)
	if p, err := h.client().Process(ctxT(t), "kept"); err != nil || p.State != api.StateRunning || p.InitPID != kept.InitPID || !running(kept.InitPID) {
		t.Fatalf("kept after the sweep: %+v, %v", p, err)
	}
}

// TestRestoringCopyWithoutImageExits is a fork copy whose restore a daemon
// crash cut short (as the crash test found): its image goes with the
// incomplete fork image, so it is reported exited, not hibernated in no
// snapshot.
func TestRestoringCopyWithoutImageExits(t *testing.T) {
	h := newHarness(t)
	p := h.run("copy-1", "sleep", "1000")
	h.stop()
	killTree(t, p.InitPID)
	if !editRecord(t, h, "copy-1", func(m map[string]any) bool {
		m["state"], m["snapshot"] = string(api.StateRestoring), ""
		return true
	}) {
		t.Fatal("no record of copy-1")
	}
	h.start()
	got, err := h.client().Process(ctxT(t), "copy-1")
	if err != nil || got.State != api.StateExited || got.Exit == nil || !got.Exit.Unknown || !strings.Contains(got.Exit.Reason, "being restored") {
		t.Fatalf("copy-1 after restart: %+v, %v", got, err)
	}
}

// TestSandboxHomesFollowRecords: a supervisor's private directory lives as
// long as its record may still run or be restored: gone once the process
// exits, and one no record owns (a daemon killed in between) is removed at
// start.
func TestSandboxHomesFollowRecords(t *testing.T) {
	h := newHarness(t)
	p := h.run("short", "sleep", "1000")
	home := filepath.Join(h.cfg.StateDir, "sandbox", p.ID)
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("supervisor directory of a running process: %v %v", fi, err)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "short", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("short")
	if _, err := os.Stat(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("supervisor directory after the exit: %v", err)
	}
	h.stop()
	stray := filepath.Join(h.cfg.StateDir, "sandbox", "no-such-record")
	if err := os.Mkdir(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	h.start()
	if _, err := os.Stat(stray); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stray supervisor directory after a restart: %v", err)
	}
}
