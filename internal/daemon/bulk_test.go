package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestEncodeLogsAsEncodeResult: a logs reply encoded a chunk at a time is
// the bytes encodeResult gives, at and around chunk boundaries, with what
// JSON escapes (quotes, control bytes, invalid UTF-8, U+2028, HTML).
func TestEncodeLogsAsEncodeResult(t *testing.T) {
	odd := []string{"", `"quoted" \ back`, "tab\tnul\x00", "bad \xff utf-8", "sep \u2028\u2029", "<a href='x'>&</a>", "ünïcödé"}
	for _, n := range []int{0, 1, logChunk - 1, logChunk, logChunk + 1, 3*logChunk + 7} {
		for _, truncated := range []bool{false, true} {
			lines := make([]string, n)
			for i := range lines {
				lines[i] = odd[i%len(odd)] + strings.Repeat("x", i%3)
			}
			res := api.LogsResult{Name: "job \"1\" <b>", Lines: lines, Truncated: truncated}
			want, err := encodeResult(res)
			if err != nil {
				t.Fatal(err)
			}
			slot, err := bulkgate.New(1).Enter(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeLogs(context.Background(), slot, res)
			slot.Leave()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%d lines, truncated %v: encodeLogs differs from encodeResult\n got %.200s\nwant %.200s", n, truncated, got, want)
			}
		}
	}
}
