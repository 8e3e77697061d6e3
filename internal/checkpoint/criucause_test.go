package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDumpErrorNamesWhatCannotBeImaged: a dump that CRIU refuses for what
// the tree holds is ErrNotCheckpointable and says so in words; any other
// failure keeps CRIU's Error lines.
func TestDumpErrorNamesWhatCannotBeImaged(t *testing.T) {
	for _, c := range []struct {
		log, class, says string
	}{
		{"(00.1) Error (criu/sk-unix.c:874): unix: External socket is used. Consider using --ext-unix-sk option.\n" +
			"(00.2) Error (criu/cr-dump.c:2111): Dumping FAILED.\n", "not checkpointable", "Unix socket connected to something outside"},
		{"(00.1) Error (criu/sockets.c:628): sockets: Can't get 1:16 opt: Operation not supported\n" +
			"(00.2) Error (criu/cr-dump.c:2111): Dumping FAILED.\n", "not checkpointable", "network socket"},
		{"(00.1) Error (criu/files.c:9): Can't open file\n", "failed", "Error (criu/files.c:9): Can't open file"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, DumpLog), []byte(c.log), 0o600); err != nil {
			t.Fatal(err)
		}
		err := (&CRIU{}).opError("dump", 42, dir, DumpLog, errors.New("swrk: dump failed"))
		if got := errors.Is(err, ErrNotCheckpointable); got != (c.class == "not checkpointable") {
			t.Errorf("%q: ErrNotCheckpointable %v", c.log, got)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "criu dump of pid 42: "+c.class+": ") || !strings.Contains(msg, c.says) {
			t.Errorf("%q: message %q", c.log, msg)
		}
		if c.class == "not checkpointable" && strings.Contains(msg, "Error (") {
			t.Errorf("%q: message quotes CRIU's log: %q", c.log, msg)
		}
	}
}
