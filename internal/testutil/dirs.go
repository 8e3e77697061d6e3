package testutil

import (
	"os"
	"testing"
)

// ShortDir is a temp dir with a short path (Unix socket paths are limited
// to 107 bytes), world-traversable so unprivileged test users can reach
// sockets inside it. It is removed when t ends.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
