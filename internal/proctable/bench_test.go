package proctable

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkUpdate is one record's change in a table of n: what each exit,
// start or freeze costs the daemon, whoever's process it is, on a box with
// many users' records (500 finished kept per user by default).
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			st, err := store.OpenRecords(filepath.Join(b.TempDir(), "procs"))
			if err != nil {
				b.Fatal(err)
			}
			tb := New(st, nil)
			for i := range n {
				r := rec(fmt.Sprintf("p%05d", i), api.StateRunning)
				r.Owner.UID = uint32(1000 + i%50)
				if _, err := tb.Create(r); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				_, err := tb.Update(Key{UID: uint32(1000 + i%n%50), Name: fmt.Sprintf("p%05d", i%n)}, func(r *Record) error { r.Note = fmt.Sprint(i); return nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
