package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CRIUEnv names a CRIU to use instead of installing one, for a compiled
// test binary run where the install script cannot run (a lent GPU machine).
const CRIUEnv = "GPUSCHED_TEST_CRIU"

var (
	criuOnce sync.Once
	criuPath string
	criuErr  string
)

// CRIU returns the path of a working CRIU >= 4.0, as the project's install
// script provides it (installing it when missing), or skips t: CRIU needs
// root, and a machine the script cannot install on has none.
func CRIU(t testing.TB) string {
	t.Helper()
	RequiresRoot(t)
	criuOnce.Do(func() {
		if p := os.Getenv(CRIUEnv); p != "" {
			criuPath = p
			return
		}
		root, err := ModuleRoot()
		if err != nil {
			criuErr = err.Error()
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(root, "scripts", "install-criu.sh"), "--print-path")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			criuErr = err.Error() + ": " + stderr.String()
			return
		}
		criuPath = strings.TrimSpace(string(out))
	})
	if criuPath == "" {
		t.Skipf("needs CRIU >= 4.0 (scripts/install-criu.sh failed: %s)", criuErr)
	}
	return criuPath
}
