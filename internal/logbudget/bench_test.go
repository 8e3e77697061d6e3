package logbudget

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkPass measures one check of 10 users' 256 live processes each
// (every log with one rotated copy: 5,120 files), all within the budget
// and within what all may hold together:
// what the daemon spends once a second on a full box.
func BenchmarkPass(b *testing.B) {
	dir := b.TempDir()
	var logs []Log
	for u := range 10 {
		for p := range 256 {
			path := filepath.Join(dir, fmt.Sprintf("u%d-p%d.log", u, p))
			for _, name := range []string{path, path + ".1"} {
				if err := os.WriteFile(name, []byte("line\n"), 0o600); err != nil {
					b.Fatal(err)
				}
			}
			logs = append(logs, Log{UID: uint32(1000 + u), User: fmt.Sprint("u", u), Name: fmt.Sprint("p", p), Path: path})
		}
	}
	k := Keeper{Budget: 8 << 30, Keep: 1, Together: func() int64 { return 1 << 40 }, Live: func() []Log { return logs }, Reports: func(Report) { b.Fatal("cut within the budget") }}
	b.ReportAllocs()
	for b.Loop() {
		k.Pass()
	}
}
