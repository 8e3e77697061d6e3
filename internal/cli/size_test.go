package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizeNeedsUnit: a memory size below 64 without a unit ("10") is far
// more likely GiB with the unit forgotten than MiB; every flag and jobs-file
// key that takes a size refuses it, suggests the unit, and calls nothing.
func TestSizeNeedsUnit(t *testing.T) {
	jobs := filepath.Join(t.TempDir(), "jobs.txt")
	if err := os.WriteFile(jobs, []byte("[vram=10] python a.py\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const hint = `size "10" has no unit: did you mean 10G? (a number alone is MiB: write 10M for 10 MiB)`
	for _, args := range [][]string{
		{"submit", "--vram", "10", "--", "python", "train.py"},
		{"acquire", "--min-free", "10"},
		{"fill", "0", "--mib", "10"},
		{"run", "x", "--mps-mem-limit", "10", "--", "true"},
		{"submit", "--mps-mem-limit", "10", "--", "true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) { checkUsageError(t, args, hint) })
	}
	d := newFakeDaemon(t, nil)
	if _, errOut, code := ctl(t, d, "submit", "--file", jobs); code != 1 || !strings.Contains(errOut, "jobs.txt:1: vram: "+hint) {
		t.Errorf("jobs file vram=10: exit %d, stderr %q", code, errOut)
	}
	if reqs := d.requests(); len(reqs) > 0 {
		t.Errorf("a bad size still made %d calls to the daemon", len(reqs))
	}
}
