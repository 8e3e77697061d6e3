package logreply

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestEncodeAsEncodingJSON: a logs reply encoded from the bytes of a
// log's tail, a chunk at a time, is the bytes encoding/json gives for its
// lines as strings (HTML escaping off, as the daemon's line writer), for
// the odd tails of forOddTails.
func TestEncodeAsEncodingJSON(t *testing.T) {
	forOddTails(t, func(lines []string, truncated bool, tl *logfile.Tailed) {
		res := api.LogsResult{Name: "job \"1\" <b>", Lines: lines, Truncated: truncated}
		want := jsonOf(t, res)
		yields := 0
		got, err := Encode(context.Background(), res.Name, tl, func(context.Context) error { yields++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d lines, truncated %v: Encode differs from encoding/json\n got %.200s\nwant %.200s", len(lines), truncated, got, want)
		}
		if want := max(len(lines)-1, 0) / Chunk; yields != want {
			t.Fatalf("%d lines: yielded %d times, want %d", len(lines), yields, want)
		}
	})
}

// forOddTails calls fn with tails of lines of what JSON escapes (quotes,
// control bytes, invalid UTF-8, U+2028, HTML), at and around chunk
// boundaries, with and without a first line cut before the MiB read
// (truncated), and the lines as strings (a cut one with its CutMarker).
func forOddTails(t *testing.T, fn func(lines []string, truncated bool, tl *logfile.Tailed)) {
	odd := []string{"", `"quoted" \ back`, "tab\tnul\x00\x1f", "bad \xff utf-8 \xe2\x80", "sep \u2028\u2029", "<a href='x'>&</a>", "ünïcödé"}
	for _, n := range []int{0, 1, Chunk - 1, Chunk, Chunk + 1, 3*Chunk + 7} {
		for _, truncated := range []bool{false, true} {
			lines := make([]string, n)
			for i := range lines {
				lines[i] = odd[i%len(odd)] + strings.Repeat("x", i%3)
			}
			var head string
			if truncated { // a line longer than the MiB read comes first
				head = strings.Repeat("y", logfile.MaxTail) + "\n"
				lines = append([]string{strings.Repeat("y", logfile.MaxLine) + logfile.CutMarker}, lines...)
			}
			fn(lines, truncated, tailOf(t, head, lines[len(lines)-n:]))
		}
	}
}

func tailOf(t *testing.T, head string, lines []string) *logfile.Tailed {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	b.WriteString(head)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tl, err := logfile.Tail(context.Background(), path, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}
