package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/gpusched/gpusched/pkg/api"
)

// The screenshot in docs/dashboard.md: its size and where it sits.
const (
	shotWidth, shotHeight = 100, 30
	shotSection           = "## What it shows\n"
	shotOpen, shotClose   = "```text\n", "\n```\n"
)

// TestDashboardDocScreenshot: the screenshot in docs/dashboard.md is what
// the dashboard draws on a 100x30 terminal from shotModel's data, so it
// cannot drift from the code.
func TestDashboardDocScreenshot(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "dashboard.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	section := bytes.Index(doc, []byte(shotSection))
	open := bytes.Index(doc[max(section, 0):], []byte(shotOpen))
	if section < 0 || open < 0 {
		t.Fatalf("%s has no %q block after %q", path, shotOpen, shotSection)
	}
	start := section + open + len(shotOpen)
	end := bytes.Index(doc[start:], []byte(shotClose))
	if end < 0 {
		t.Fatalf("%s: the screenshot block does not end", path)
	}
	want := shotModel(t).render()
	if *updateDocs {
		out := append(append(append([]byte{}, doc[:start]...), want...), doc[start+end:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := string(doc[start : start+end]); got != want {
		t.Errorf("the screenshot in %s is not what the dashboard draws; regenerate it: "+
			"go test ./internal/cli -run TestDashboardDocScreenshot -update\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// shotModel is the dashboard of the screenshot: two GPUs, one of them
// unhealthy, a process in each state, two queued jobs and a few events,
// after t on a frozen process whose memory did not fit. Its times are
// local, so the screenshot is the same in every time zone.
func shotModel(t *testing.T) dashModel {
	t.Helper()
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.Local)
	running := func(name string, mib uint64, ago time.Duration) api.Process {
		p := proc(name)
		p.GPUs = []api.ProcessGPU{{Index: 0, UUID: "GPU-aaaa", UsedMiB: mib}}
		p.VRAMMiB, p.CreatedAt, p.StartedAt = mib, now.Add(-ago), now.Add(-ago)
		return p
	}
	frozen := running("reward", 0, 3*time.Hour)
	frozen.State, frozen.Tier, frozen.HostMiB = api.StateFrozen, api.TierHost, 8<<10
	parked := running("eval-old", 0, 26*time.Hour)
	parked.State, parked.Tier, parked.Snapshot, parked.DiskMiB = api.StateHibernated, api.TierDisk, "snap-7", 6<<10
	done := exited("sweep-3", api.Exit{Code: intp(0)})

	s := barsSnapshot()
	s.at = now
	s.procs = []api.Process{running("train", 12<<10, 90*time.Minute), frozen, done, running("policy", 18<<10, 12*time.Minute), parked}
	s.status.Processes, s.status.States = 5, map[api.State]int{api.StateRunning: 2, api.StateFrozen: 1, api.StateHibernated: 1, api.StateExited: 1}
	s.status.Jobs = map[api.JobState]int{api.JobQueued: 2}
	finetune := queuedJob("finetune")
	finetune.VRAM, finetune.VRAMMiB, finetune.GPUs, finetune.Reason = api.VRAM{MiB: 22118}, 22118, 2, "waiting for 2 GPUs with 21.6 GiB free"
	s.jobs = []api.Job{queuedJob("eval"), finetune}

	m, _ := step(t, newTestDash(&fakeDashSource{}), tea.WindowSizeMsg{Width: shotWidth, Height: shotHeight})
	m, _ = step(t, m, s)
	for _, e := range []api.Event{
		{Type: api.EventProcess, Name: "reward", PrevState: api.StateRunning, State: api.StateFreezing},
		{Type: api.EventProcess, Name: "reward", PrevState: api.StateFreezing, State: api.StateFrozen},
		{Type: api.EventJob, Name: "eval", JobState: api.JobQueued, Job: &api.Job{Reason: "waiting for 1 GPU with 18.0 GiB free"}},
		{Type: api.EventProcess, Name: "sweep-3", PrevState: api.StateRunning, State: api.StateExited, Process: &done},
	} {
		e.Time = now.Add(-time.Minute + time.Duration(len(m.events))*10*time.Second)
		m, _ = step(t, m, dashEventMsg{e})
	}
	m, _ = press(t, m, "down")
	m, _ = press(t, m, "down")
	m, _ = step(t, m, dashActionMsg{verb: "thaw", name: "reward",
		err: api.Errorf(api.CodeResourceExhausted, `thaw "reward": needs 8.0 GiB on GPU 0, 4.0 GiB free`)})
	if n := strings.Count(m.render(), "\n") + 1; n > shotHeight {
		t.Fatalf("the screenshot has %d lines, over %d", n, shotHeight)
	}
	return m
}
