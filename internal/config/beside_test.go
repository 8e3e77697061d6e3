package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirsBesideSocket: a daemon started with only --socket (or
// $GPUSCHED_SOCKET) keeps its state and logs beside that socket, not in the
// system daemon's directories; what the command line or the file sets wins.
func TestDirsBesideSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "g.sock") // its directory need not exist yet
	file := writeFile(t, `state-dir = "/srv/file-state"`)
	fileSocket := writeFile(t, "socket = \""+sock+"\"")
	tests := []struct {
		name       string
		args       []string
		state, log string
	}{
		{"default socket", nil, "/var/lib/gpusched", "/var/log/gpusched"},
		{"socket alone", []string{"--socket", sock}, filepath.Join(dir, "run", "state"), filepath.Join(dir, "run", "logs")},
		{"state dir given", []string{"--socket", sock, "--state-dir", "/srv/st"}, "/srv/st", filepath.Join(dir, "run", "logs")},
		{"both given", []string{"--socket", sock, "--state-dir", "/srv/st", "--log-dir", "/srv/lg"}, "/srv/st", "/srv/lg"},
		{"default restated", []string{"--socket", sock, "--state-dir", "/var/lib/gpusched"}, "/var/lib/gpusched", filepath.Join(dir, "run", "logs")},
		{"state dir in the file", []string{"--config", file, "--socket", sock}, "/srv/file-state", filepath.Join(dir, "run", "logs")},
		// The file is the machine's own daemon's: its socket moves nothing.
		{"socket in the file", []string{"--config", fileSocket}, "/var/lib/gpusched", "/var/log/gpusched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.StateDir != tt.state || c.LogDir != tt.log {
				t.Errorf("state %s, logs %s; want %s, %s", c.StateDir, c.LogDir, tt.state, tt.log)
			}
		})
	}
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("GPUSCHED_SOCKET", sock)
		if c, err := load(nil, io.Discard); err != nil || c.StateDir != filepath.Join(dir, "run", "state") {
			t.Errorf("state %s, %v", c.StateDir, err)
		}
	})
}

// TestDirsBesideSharedSocketDir: beside a socket in a directory others may
// write (such as /tmp), where they could plant the directories first, the
// daemon refuses to start unless both directories are given.
func TestDirsBesideSharedSocketDir(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shared, "g.sock")
	_, err := load([]string{"--socket", sock, "--state-dir", "/srv/st"}, io.Discard)
	want := "--socket " + sock + ": the state and logs of a daemon on it go to " + shared + "/state and " + shared + "/logs unless --state-dir and --log-dir say otherwise, but other users may write to " + shared + " (mode 1777): give both flags, or put the socket in a directory of its own"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	for _, sub := range []string{"", "new/dir"} { // the nearest existing ancestor is checked
		if _, err := load([]string{"--socket", filepath.Join(shared, sub, "g.sock")}, io.Discard); err == nil || !strings.Contains(err.Error(), "other users may write to "+shared) {
			t.Errorf("socket in %s/%s: %v", shared, sub, err)
		}
	}
	c, err := load([]string{"--socket", sock, "--state-dir", "/srv/st", "--log-dir", "/srv/lg"}, io.Discard)
	if err != nil || c.StateDir != "/srv/st" || c.LogDir != "/srv/lg" {
		t.Errorf("both given: %+v, %v", c, err)
	}
}
