package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestOneIsSingular: counts of one read "1 copy", "1 GPU", "1 snapshot",
// "1 CUDA process", "1 page", "1 problem".
func TestOneIsSingular(t *testing.T) {
	var b strings.Builder
	if err := writeFork(&b, &api.ForkResult{Name: "warm", Copies: []api.Process{proc("warm-1")}, MS: map[string]float64{"total": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshots(&b, &api.SnapshotsResult{Snapshots: []api.Snapshot{{ID: "eb61454e", Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(&b, &api.CheckpointResult{Op: "freeze", Name: "a", PIDs: []int{7}, MS: map[string]float64{}}); err != nil {
		t.Fatal(err)
	}
	if err := writeHibernate(&b, &api.HibernateResult{Name: "a", Pages: 1, MS: map[string]float64{}}); err != nil {
		t.Fatal(err)
	}
	e := lineErrors{file: "jobs.txt"}
	e.add(1, "bad")
	b.WriteString(e.err().Error())
	for _, want := range []string{"into 1 copy from", "\n1 snapshot listed", "from 1 CUDA process in", "full image of 1 page;", "jobs.txt: 1 problem, nothing"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	checkUsageError(t, []string{"fork", "a", "--copies", "1", "--gpus", "0,1"}, "--gpus names 2 GPUs for 1 copy: give one per copy")
}
