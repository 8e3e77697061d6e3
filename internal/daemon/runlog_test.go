package daemon

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestStartLogCutsTheCommand: the daemon's "process started" line carries
// a command's first KiB and says it was cut, not the 200 KiB a user may
// run with (in a loop, each into the journal).
func TestStartLogCutsTheCommand(t *testing.T) {
	h := prepareHarness(t)
	core, logs := observer.New(zap.InfoLevel)
	h.opts = append(h.opts, WithLogger(zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))))
	h.start()
	pad := strings.Repeat("x", 100<<10)
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "long", Dir: "/", Cmd: []string{"sh", "-c", "exec sleep 1000", "sh", pad, pad}}); err != nil {
		t.Fatal(err)
	}
	started := logs.FilterMessage("process started").All()
	if len(started) != 1 {
		t.Fatalf("%d \"process started\" lines, want 1", len(started))
	}
	fields := started[0].ContextMap()
	cmd, _ := fields["cmd"].([]any)
	size := 0
	for _, a := range cmd {
		s, _ := a.(string)
		size += len(s)
	}
	if size > logCmdBytes || fields["cmd_truncated"] != true || len(cmd) < 4 || cmd[0] != "sh" {
		t.Fatalf("logged %d arguments, %d bytes, cmd_truncated %v; want the first ones within %d bytes, cut", len(cmd), size, fields["cmd_truncated"], logCmdBytes)
	}
}
