package daemon

import (
	"bytes"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
)

// TestLongLinesReuseTheirBuffer: a caller sending line after line of 250
// KiB (the fairness benchmark's runs) costs the daemon about one buffer,
// not two lines' worth of allocation apiece; and each line reads back
// whole, the buffer's earlier contents never showing through.
func TestLongLinesReuseTheirBuffer(t *testing.T) {
	const lines, size = 200, 250 << 10
	// What the process allocates is measured: the best of three, since
	// what earlier tests left running may allocate meanwhile.
	best := uint64(math.MaxUint64)
	for range 3 {
		var in bytes.Buffer
		for i := range lines {
			in.WriteString(strings.Repeat(string(rune('a'+i%26)), size-i))
			in.WriteByte('\n')
		}
		r := newLineReader(&in)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range lines {
			line, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if len(line) != size-i || bytes.Count(line, []byte{byte('a' + i%26)}) != len(line) {
				t.Fatalf("line %d: %d bytes, want %d of %q", i, len(line), size-i, rune('a'+i%26))
			}
		}
		runtime.ReadMemStats(&after)
		if _, err := r.next(); err != io.EOF {
			t.Fatalf("after the last line: %v", err)
		}
		best = min(best, after.TotalAlloc-before.TotalAlloc)
	}
	// A collection may empty the pool once or twice: a few buffers, then.
	if raceEnabled {
		t.Log("the race detector's sync.Pool drops buffers: allocation not checked")
	} else if best > 8*size {
		t.Fatalf("%d lines of %d KiB allocated %d KiB", lines, size>>10, best>>10)
	}
}
