package testutil

import (
	"os"
	"testing"

	"github.com/gpusched/gpusched/internal/rlimit"
)

// CallerLimits are the limits the tests' callers lower: as prlimit(1)
// options, and the set a caller's process then holds (own, this process's
// limits, with those changed). Soft and hard differ where the Go runtime of
// gpuschedctl leaves them alone (it raises a soft NOFILE below its hard
// limit).
func CallerLimits(t testing.TB) (prlimitArgs []string, own, want rlimit.Set) {
	t.Helper()
	own, err := rlimit.Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want = rlimit.Set{}
	for name, l := range own {
		want[name] = l
	}
	want["nofile"] = rlimit.Limit{Cur: 64, Max: 64}
	want["core"] = rlimit.Limit{Cur: 0, Max: 1 << 20}
	want["fsize"] = rlimit.Limit{Cur: 1 << 20, Max: 2 << 20}
	want["nproc"] = rlimit.Limit{Cur: 300, Max: 400}
	want["as"] = rlimit.Limit{Cur: 64 << 30, Max: 128 << 30}
	return []string{"--nofile=64:64", "--core=0:1048576", "--fsize=1048576:2097152", "--nproc=300:400",
		"--as=68719476736:137438953472"}, own, want
}
