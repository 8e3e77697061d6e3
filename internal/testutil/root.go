package testutil

import (
	"os"
	"testing"
)

// RequiresRoot skips t unless it runs as root. CI runs as root, so these
// tests run there.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (spawns processes as other users in new PID namespaces); run the suite as root")
	}
}
