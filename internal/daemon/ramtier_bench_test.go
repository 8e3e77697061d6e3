package daemon

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkHostMiB is the host RAM tier's sum, which every status call
// takes, over 750 records of another user (a user at their process cap
// with a retention's worth of exited ones).
func BenchmarkHostMiB(b *testing.B) {
	st, err := store.OpenRecords(filepath.Join(b.TempDir(), "procs"))
	if err != nil {
		b.Fatal(err)
	}
	d := &Daemon{table: proctable.New(st, nil)}
	for i := range 750 {
		r := proctable.Record{ID: fmt.Sprintf("p%d", i), Name: fmt.Sprintf("n%d", i), State: api.StateRunning, Cmd: []string{"sleep", "1000"}}
		if i%3 == 0 {
			r.State = api.StateExited
		}
		if _, err := d.table.Create(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		d.hostMiB(nil)
	}
}
