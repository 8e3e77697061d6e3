package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// The content of a log is the process's to choose: these tests hold every
// read to a bound whatever it chose, measured in bytes read (the rchar of
// /proc/self/io) and bytes allocated, not in time.

// readBound and allocBound are what one call may read (besides the MaxLag
// bytes a Follow may catch up on) and allocate: well above what it needs,
// far below the files these tests use.
const (
	readBound  = 4 * MaxTail
	allocBound = 32 << 20
)

// checkCost fails when fn read more than readBound plus extra bytes or
// allocated more than allocBound.
func checkCost(t *testing.T, what string, extra uint64, fn func()) {
	t.Helper()
	read, alloc := testutil.Cost(t, fn)
	if read > readBound+extra || alloc > allocBound {
		t.Errorf("%s read %d bytes and allocated %d, want at most %d and %d", what, read, alloc, readBound+extra, allocBound)
	}
}

// sparseLog makes a log of head, then a hole up to size, then tail.
func sparseLog(t *testing.T, head string, size int64, tail string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	writeFiles(t, path, map[string]string{"": head})
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	w, err := OpenAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	appendTo(t, w, tail)
	return path
}

// holeLine is what a tail or a follow makes of a line it reads only part
// of from a hole: MaxLine zero bytes, cut.
var holeLine = strings.Repeat("\x00", MaxLine) + CutMarker

// TestTailHugeLineWithoutNewline: a log of 1 GiB without a newline (a hole,
// as ftruncate makes it) costs a read of MaxTail bytes and gives one cut line.
func TestTailHugeLineWithoutNewline(t *testing.T) {
	path := sparseLog(t, "", 1<<30, "")
	for _, n := range []int{1, 100, -1} {
		var got []string
		var truncated bool
		var err error
		checkCost(t, fmt.Sprintf("Tail(%d)", n), 0, func() { got, truncated, err = tailStrings(context.Background(), path, n, 1) })
		// A single line asked for is there, cut; more are not.
		if err != nil || truncated != (n != 1) || !slices.Equal(got, []string{holeLine}) {
			t.Errorf("Tail(%d) = %q, %v, %v; want one cut line, truncated %v", n, short(got), truncated, err, n != 1)
		}
	}

	var got []string
	var offset int64
	var err error
	checkCost(t, "TailForFollow", 0, func() { got, offset, err = followStrings(context.Background(), path, 10, 1) })
	if err != nil || len(got) != 0 || offset != 1<<30-MaxTail {
		t.Errorf("TailForFollow = %q, %d, %v; want no line and offset %d", short(got), offset, err, 1<<30-MaxTail)
	}
	lines := followToEnd(t, path, offset)
	if !slices.Equal(lines, []string{holeLine}) {
		t.Errorf("Follow from %d = %q, want one cut line", offset, short(lines))
	}
}

// TestTailHugeLine: a line of 200 MiB between two short ones is returned
// cut, and the line before it is left out, with truncated.
func TestTailHugeLine(t *testing.T) {
	const long = 200 << 20
	path := sparseLog(t, "first\n", 6+long, "\nlast\n")
	var got []string
	var truncated bool
	var err error
	checkCost(t, "Tail", 0, func() { got, truncated, err = tailStrings(context.Background(), path, 3, 0) })
	if want := []string{holeLine, "last"}; err != nil || !truncated || !slices.Equal(got, want) {
		t.Errorf("Tail = %q, %v, %v; want %q, truncated", short(got), truncated, err, short(want))
	}

	var offset int64
	checkCost(t, "TailForFollow", 0, func() { got, offset, err = followStrings(context.Background(), path, 3, 0) })
	if want := []string{holeLine, "last"}; err != nil || !slices.Equal(got, want) || offset != 6+long+6 {
		t.Errorf("TailForFollow = %q, %d, %v; want %q, %d", short(got), offset, err, short(want), 6+long+6)
	}
}

// TestTailByteCap: however many lines are asked for, Tail returns at most
// MaxTail bytes of them, the newest, across the rotated copies.
func TestTailByteCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	// Lines of 108 bytes, so that MaxTail-4 bytes (the rest after "a\nb\n")
	// hold whole lines, fewer than MaxTailLines.
	const lineLen = 108
	line := strings.Repeat("y", lineLen-1)
	lines := bytes.Repeat([]byte(line+"\n"), 16<<20/lineLen)
	want := (MaxTail-4)/lineLen + 2
	if err := os.WriteFile(path+".1", lines, 0o600); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, path, map[string]string{"": "a\nb\n"})
	var got []string
	var truncated bool
	var err error
	checkCost(t, "Tail(-1)", 0, func() { got, truncated, err = tailStrings(context.Background(), path, -1, 1) })
	if err != nil || !truncated || len(got) != want || !slices.Equal(got[len(got)-3:], []string{line, "a", "b"}) {
		t.Fatalf("Tail(-1) = %d lines ending %q, %v, %v; want %d, truncated", len(got), got[max(len(got)-3, 0):], truncated, err, want)
	}

	// Exactly MaxTail bytes in all is not truncated.
	if err := os.WriteFile(path+".1", lines[:MaxTail-4], 0o600); err != nil {
		t.Fatal(err)
	}
	got, truncated, err = tailStrings(context.Background(), path, -1, 1)
	if err != nil || truncated || len(got) != want {
		t.Fatalf("Tail(-1) of MaxTail bytes = %d lines, %v, %v; want %d, not truncated", len(got), truncated, err, want)
	}
	// One byte more is, and cuts the oldest line.
	if err := os.WriteFile(path+".1", append([]byte("x"), lines[:MaxTail-4]...), 0o600); err != nil {
		t.Fatal(err)
	}
	got, truncated, err = tailStrings(context.Background(), path, -1, 1)
	if err != nil || !truncated || len(got) != want || got[0] != line+CutMarker {
		t.Fatalf("Tail(-1) of MaxTail+1 bytes = %d lines from %q, %v, %v; want %d from the cut one, truncated", len(got), got[0], truncated, err, want)
	}
}

// TestTailLineCap: a MiB of newlines is a million empty lines; Tail returns
// the last MaxTailLines of them, across the rotated copies, says truncated
// when more were asked for, and allocates for those alone.
func TestTailLineCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	newlines := bytes.Repeat([]byte("\n"), MaxTail)
	// Tail holds the bytes read (one per line here) and a chunk buffer:
	// no string header per line, which were a MiB.
	const allocBound = 2*(MaxTailLines+1) + 2*chunkSize
	for _, tc := range []struct {
		rotated, current string // lines: rotated + current, the rotated copy first
		n                int
		want             int
		truncated        bool
	}{
		{strings.Repeat("\n", MaxTail-2), "a\n", -1, MaxTailLines, true},
		{strings.Repeat("\n", MaxTail-2), "a\n", MaxTailLines + 1, MaxTailLines, true},
		{strings.Repeat("\n", MaxTail-2), "a\n", MaxTailLines, MaxTailLines, false},
		{strings.Repeat("\n", MaxTailLines-2), "a\n", -1, MaxTailLines - 1, false},
		{strings.Repeat("\n", MaxTailLines-1), "a\n", -1, MaxTailLines, false},
		{strings.Repeat("\n", MaxTailLines), "a\n", -1, MaxTailLines, true},   // the line left out is in the rotated copy
		{"", string(newlines[:MaxTailLines]) + "a\n", -1, MaxTailLines, true}, // and here in the current file
	} {
		writeFiles(t, path, map[string]string{".1": tc.rotated, "": tc.current})
		var tl *Tailed
		var err error
		read, alloc := testutil.Cost(t, func() { tl, err = Tail(context.Background(), path, tc.n, 1) })
		if err != nil {
			t.Fatal(err)
		}
		got, truncated := tl.strings(), tl.Truncated()
		if truncated != tc.truncated || len(got) != tc.want || got[len(got)-1] != "a" {
			t.Errorf("Tail(%d) of %d+%d bytes = %d lines, truncated %v, %v; want %d, truncated %v",
				tc.n, len(tc.rotated), len(tc.current), len(got), truncated, err, tc.want, tc.truncated)
		}
		if read > readBound || alloc > allocBound {
			t.Errorf("Tail(%d) read %d bytes and allocated %d; want at most %d and %d", tc.n, read, alloc, readBound, allocBound)
		}
	}

	// A follow starts with as many lines, at the end of the file, within
	// the same bound.
	writeFiles(t, path, map[string]string{".1": "", "": string(newlines)})
	var tl *Tailed
	var err error
	_, alloc := testutil.Cost(t, func() { tl, err = TailForFollow(context.Background(), path, -1, 1) })
	if err != nil || tl.Len() != MaxTailLines || tl.Offset() != MaxTail || alloc > allocBound {
		t.Fatalf("TailForFollow(-1) = %v, allocating %d; want %d lines, offset %d, at most %d allocated", err, alloc, MaxTailLines, MaxTail, allocBound)
	}
}

// TestTailCanceled: a tail stops at the end of its context.
func TestTailCanceled(t *testing.T) {
	path := sparseLog(t, "", 1<<30, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := tailStrings(ctx, path, -1, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Tail = %v, want context.Canceled", err)
	}
	if _, err := TailForFollow(ctx, path, -1, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("TailForFollow = %v, want context.Canceled", err)
	}
	err := Follow(ctx, testWatcher(t), path, 0, nil, lineFunc(func(string) error { return nil }))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Follow = %v, want context.Canceled", err)
	}
}

// followToEnd runs Follow from offset to the end of the file (done is
// closed), checking its cost (it may skip to MaxLag bytes before the end),
// and returns the lines.
func followToEnd(t *testing.T, path string, offset int64) []string {
	t.Helper()
	done := make(chan struct{})
	close(done)
	var lines []string
	var err error
	checkCost(t, "Follow", MaxLag, func() {
		err = Follow(context.Background(), testWatcher(t), path, offset, done, lineFunc(func(l string) error {
			lines = append(lines, l)
			return nil
		}))
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	return lines
}

// TestFollowSkipsAhead: a follower far behind the end (here a hole of
// 1 GiB from offset 0) skips to MaxLag bytes before it and says so.
func TestFollowSkipsAhead(t *testing.T) {
	path := sparseLog(t, "", 1<<30, "\nend\n")
	want := []string{fmt.Sprintf(SkipFormat, 1<<30+5-MaxLag), holeLine, "end"}
	if got := followToEnd(t, path, 0); !slices.Equal(got, want) {
		t.Errorf("Follow = %q, want %q", short(got), short(want))
	}
}

// TestFollowSkipsAheadWhileFollowing: a file extended by a hole while
// followed costs a read of MaxLag bytes; the line in progress is cut.
func TestFollowSkipsAheadWhileFollowing(t *testing.T) {
	path, w := openLog(t)
	fw := startFollow(t, path, 0)
	appendTo(t, w, "a\nhalf")
	fw.expect(t, "a")
	var skipped int64
	read, alloc := testutil.Cost(t, func() {
		if err := w.Truncate(1 << 30); err != nil {
			t.Fatal(err)
		}
		appendTo(t, w, "\nb\n")
		fw.expect(t, "half"+CutMarker)
		var line string
		select {
		case line = <-fw.lines:
		case <-fw.ended:
			t.Fatalf("Follow returned %v", fw.err)
		}
		if _, err := fmt.Sscanf(line, SkipFormat, &skipped); err != nil {
			t.Fatalf("line %q, want a skip: %v", short([]string{line}), err)
		}
		fw.expect(t, holeLine, "b")
	})
	// Follow may see the file before or after the final write.
	if want := int64(1<<30 - MaxLag - 6); skipped != want && skipped != want+3 {
		t.Errorf("skipped %d bytes, want %d or %d", skipped, want, want+3)
	}
	if read > readBound+MaxLag || alloc > allocBound {
		t.Errorf("Follow read %d bytes and allocated %d, want at most %d and %d", read, alloc, readBound+MaxLag, allocBound)
	}
	fw.finish(t)
}
