package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestQueueResumesAfterKill9: under the real daemon binary, kill -9 the
// daemon with two jobs running, one queued and one finished; the next
// daemon re-adopts the running ones (same pids), starts the queued one
// when room frees, and runs nothing twice.
func TestQueueResumesAfterKill9(t *testing.T) {
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.Sim = "1x24G" })
	dp := h.startBinary()
	starts := filepath.Join(t.TempDir(), "starts")
	job := func(name, vram string, hold string) api.JobSpec {
		script := `echo "$GPUSCHED_JOB" >> ` + starts + `; exec ` + h.bins.SimJob + ` --vram ` + vram + ` --hold ` + hold
		return api.JobSpec{Name: name, Cmd: []string{"sh", "-c", script}, VRAM: api.VRAM{MiB: 10240}}
	}
	ids := map[string]string{}
	for _, s := range []api.JobSpec{job("a", "10240", "0"), job("b", "10240", "0"), job("c", "10240", "0")} {
		ids[s.Name] = h.submit(s).ID
	}
	h.waitRunning("a", "b")
	done := job("d", "512", "0.01")
	done.VRAM = api.VRAM{MiB: 512}
	ids["d"] = h.submit(done).ID
	if j := h.waitJob("d"); j.State != api.JobDone {
		t.Fatalf("d: %s %q", j.State, j.Reason)
	}
	pids := map[string]int{"a": h.proc("a").PID, "b": h.proc("b").PID}

	_ = dp.cmd.Process.Kill()
	_ = dp.cmd.Wait()
	h.startBinary()
	for name, pid := range pids {
		j := h.job(name)
		if j.State != api.JobRunning || len(j.Attempts) != 1 || h.proc(name).PID != pid {
			t.Fatalf("%s after restart: %s, %d attempts, pid %d (was %d)", name, j.State, len(j.Attempts), h.proc(name).PID, pid)
		}
	}
	if j := h.job("c"); j.State != api.JobQueued {
		t.Fatalf("c after restart: %s", j.State)
	}
	if j := h.job("d"); j.State != api.JobDone || len(j.Attempts) != 1 {
		t.Fatalf("d after restart: %s, %d attempts", j.State, len(j.Attempts))
	}
	if _, err := h.client().Cancel(ctxT(t), "a"); err != nil {
		t.Fatal(err)
	}
	h.waitRunning("c")
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	slices.Sort(got)
	want := []string{ids["a"], ids["b"], ids["c"], ids["d"]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("job starts %v, want each job once: %v", got, want)
	}
}
