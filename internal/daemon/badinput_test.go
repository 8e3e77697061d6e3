package daemon

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// files lists every file under the daemon's state and log dirs.
func (h *harness) files() []string {
	var out []string
	for _, root := range []string{h.cfg.StateDir, h.cfg.LogDir} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() != "lock" {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// TestBadInputChangesNothing sends malformed and impossible requests, each
// of which must get its code and leave the table and the disk untouched,
// with the connection still usable afterwards.
func TestBadInputChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.run("keep", "sleep", "1000")
	huge := `{"method":"run","params":{"name":"big","cmd":["echo","` + strings.Repeat("x", api.MaxLineBytes) + `"]}}`
	tests := []struct {
		name, line string
		code       api.Code
	}{
		{"truncated json", `{"method":"run","params":{"name":"a"`, api.CodeBadRequest},
		{"not json", `hello`, api.CodeBadRequest},
		{"array", `[1,2]`, api.CodeBadRequest},
		{"no method", `{"params":{}}`, api.CodeBadRequest},
		{"unknown method", `{"method":"format_disk"}`, api.CodeUnknownMethod},
		{"hello with params", `{"method":"hello","params":{"verbose":true}}`, api.CodeInvalidArgument},
		{"oversize line", huge, api.CodeTooLarge},
		{"traversal name", `{"method":"run","params":{"name":"../../etc/passwd","cmd":["true"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"slash name", `{"method":"run","params":{"name":"a/b","cmd":["true"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"long name", `{"method":"run","params":{"name":"` + strings.Repeat("n", 65) + `","cmd":["true"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"empty name", `{"method":"run","params":{"name":"","cmd":["true"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"unknown field", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","priorty":3}}`, api.CodeInvalidArgument},
		{"wrong type", `{"method":"run","params":{"name":"a","cmd":"true","dir":"/"}}`, api.CodeInvalidArgument},
		{"nul in argv", `{"method":"run","params":{"name":"a","cmd":["tr\u0000ue"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"bad env key", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","env":{"A=B":"1"}}}`, api.CodeInvalidArgument},
		{"missing dir", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/no/such/dir"}}`, api.CodeInvalidArgument},
		{"missing command", `{"method":"run","params":{"name":"a","cmd":["/no/such/bin"],"dir":"/"}}`, api.CodeInvalidArgument},
		{"gpu and gpus", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","gpu":0,"gpus":[1]}}`, api.CodeInvalidArgument},
		{"unknown gpu uuid", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","gpu":"GPU-nope"}}`, api.CodeInvalidArgument},
		{"duplicate gpu", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","gpus":[0,0]}}`, api.CodeInvalidArgument},
		{"nice out of range", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","nice":40}}`, api.CodeInvalidArgument},
		{"unknown user", `{"method":"run","params":{"name":"a","cmd":["true"],"dir":"/","user":"no-such-user-xyz"}}`, api.CodeInvalidArgument},
		{"name taken by live", `{"method":"run","params":{"name":"keep","cmd":["true"],"dir":"/"}}`, api.CodeExists},
		{"kill unknown", `{"method":"kill","params":{"name":"ghost"}}`, api.CodeNotFound},
		{"kill bad signal", `{"method":"kill","params":{"name":"keep","signal":"SIGNOPE"}}`, api.CodeInvalidArgument},
		{"rm running", `{"method":"rm","params":{"name":"keep"}}`, api.CodeConflict},
		{"logs bad lines", `{"method":"logs","params":{"name":"keep","lines":-5}}`, api.CodeInvalidArgument},
		{"status traversal", `{"method":"status","params":{"name":".."}}`, api.CodeInvalidArgument},
	}
	rc := h.raw()
	before, seq := h.files(), h.d.table.View().Seq
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc.send(tt.line)
			resp := rc.recv()
			if resp["ok"] != false || resp["code"] != string(tt.code) {
				t.Fatalf("got %v, want code %s", resp, tt.code)
			}
			if msg, _ := resp["error"].(string); msg == "" {
				t.Fatal("no error message")
			}
			if got := h.d.table.View().Seq; got != seq {
				t.Fatalf("table changed: seq %d -> %d", seq, got)
			}
			if after := h.files(); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// The same connection still serves valid requests.
	rc.send(`{"id":"last","method":"ps"}`)
	if resp := rc.recv(); resp["ok"] != true || resp["id"] != "last" {
		t.Fatalf("connection unusable after bad input: %v", resp)
	}
}

// TestFailedStartLeavesNothing runs, as nobody, a command that passes the
// daemon's checks but that nobody may execute: the init fails, and neither
// a record, a status file nor a log is left behind.
func TestFailedStartLeavesNothing(t *testing.T) {
	h := newHarness(t)
	script := filepath.Join(h.dir, "root-only.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	before := h.files()
	_, err := h.client().Run(ctxT(t), api.RunParams{Name: "denied", Cmd: []string{script}, Dir: "/", User: "nobody"})
	if !api.IsInvalidArgument(err) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("err = %v, want invalid_argument naming the permission problem", err)
	}
	if _, ok := h.record("denied"); ok {
		t.Fatal("record of a process that never started is still listed")
	}
	if after := h.files(); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
}
