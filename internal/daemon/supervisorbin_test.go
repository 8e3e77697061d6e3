package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestRunSupervisedBySlimBinary: with gpusched-init beside the daemon's
// binary, it is each tree's supervisor; without it, the daemon's binary is.
func TestRunSupervisedBySlimBinary(t *testing.T) {
	bins := testutil.Build(t)
	copied := filepath.Join(testutil.ShortDir(t), "gpuschedd")
	b, err := os.ReadFile(bins.Daemon)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, daemon, want string
	}{
		{"beside", bins.Daemon, filepath.Join(bins.Dir, sandbox.BinaryName)},
		{"alone", copied, copied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) { c.InitPath = tc.daemon })
			p := h.run("slim", "sleep", "1000")
			exe, err := os.Readlink("/proc/" + itoa(p.InitPID) + "/exe")
			if err != nil {
				t.Fatal(err)
			}
			if exe != tc.want {
				t.Errorf("supervisor of %s runs %s, want %s", p.Name, exe, tc.want)
			}
		})
	}
}
