package daemon

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
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
		r := newLineReader(&in, nil)
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

// TestLongLinesHeldToTheirUsersBudget: each line longer than the read
// buffer holds api.MaxLineBytes of its user's budget while it is read and
// used; past the budget a long line is read through and refused
// (linesOverBudget), the next line read as ever; a short line needs none;
// the budget comes back with release. Another user has their own.
func TestLongLinesHeldToTheirUsersBudget(t *testing.T) {
	conns := newConnSet(16, 16, 2*api.MaxLineBytes)
	long := strings.Repeat("x", 100<<10) + "\n"
	reader := func(uid uint32, in string) *lineReader {
		return newLineReader(strings.NewReader(in), func() (func(), error) { return conns.longLine(uid) })
	}
	r1, r2 := reader(1001, long), reader(1001, long)
	for _, r := range []*lineReader{r1, r2} {
		if line, err := r.next(); err != nil || len(line) != 100<<10 {
			t.Fatalf("a long line within the budget: %d bytes, %v", len(line), err)
		}
	}
	r3 := reader(1001, long+"{}\n")
	if _, err := r3.next(); !errors.As(err, new(linesOverBudget)) {
		t.Fatalf("a third long line at once: %v, want linesOverBudget", err)
	}
	if line, err := r3.next(); err != nil || string(line) != "{}" {
		t.Fatalf("the short line after the refused one: %q, %v", line, err)
	}
	if line, err := reader(1002, long).next(); err != nil || len(line) != 100<<10 {
		t.Fatalf("another user's long line: %d bytes, %v", len(line), err)
	}
	r1.release()
	if line, err := reader(1001, long).next(); err != nil || len(line) != 100<<10 {
		t.Fatalf("a long line once one was released: %d bytes, %v", len(line), err)
	}
}
