package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// writeFiles writes path+suffix for each entry of files.
func writeFiles(t *testing.T, path string, files map[string]string) {
	t.Helper()
	for suffix, content := range files {
		if err := os.WriteFile(path+suffix, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		n     int
		keep  int
		want  []string
	}{
		{"missing", nil, 10, 3, []string{}},
		{"empty", map[string]string{"": ""}, 10, 0, []string{}},
		{"n zero", map[string]string{"": "a\nb\n"}, 0, 0, []string{}},
		{"fewer than n", map[string]string{"": "a\nb\n"}, 5, 0, []string{"a", "b"}},
		{"exactly n", map[string]string{"": "a\nb\nc\n"}, 3, 0, []string{"a", "b", "c"}},
		{"more than n", map[string]string{"": "a\nb\nc\n"}, 2, 0, []string{"b", "c"}},
		{"no trailing newline", map[string]string{"": "a\nb\nc"}, 2, 0, []string{"b", "c"}},
		{"empty lines kept", map[string]string{"": "\n\nx\n\n"}, 3, 0, []string{"", "x", ""}},
		{"only a newline", map[string]string{"": "\n"}, 5, 0, []string{""}},
		{"all", map[string]string{"": "a\nb"}, -1, 0, []string{"a", "b"}},
		{
			"across rotated files",
			map[string]string{"": "e\nf\n", ".1": "c\nd\n", ".2": "a\nb\n"},
			5, 2, []string{"b", "c", "d", "e", "f"},
		},
		{
			"stops once n reached",
			map[string]string{"": "e\nf\n", ".1": "c\nd\n", ".2": "a\nb\n"},
			3, 2, []string{"d", "e", "f"},
		},
		{
			"all across rotated files",
			map[string]string{"": "e\n", ".1": "c\nd\n", ".2": "a\nb\n"},
			-1, 2, []string{"a", "b", "c", "d", "e"},
		},
		{
			"beyond keep ignored",
			map[string]string{"": "c\n", ".1": "b\n", ".2": "a\n"},
			-1, 1, []string{"b", "c"},
		},
		{
			"missing rotated file skipped",
			map[string]string{"": "c\n", ".2": "a\nb\n"},
			2, 2, []string{"b", "c"},
		},
		{
			"missing current file",
			map[string]string{".1": "a\nb\n"},
			1, 1, []string{"b"},
		},
		{
			"file boundary ends a line",
			map[string]string{"": "b\n", ".1": "a"},
			-1, 1, []string{"a", "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFiles(t, path, tt.files)
			got, truncated, err := tailStrings(context.Background(), path, tt.n, tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || !slices.Equal(got, tt.want) || truncated {
				t.Errorf("Tail(%d, keep %d) = %#v, %v; want %q, false", tt.n, tt.keep, got, truncated, tt.want)
			}
		})
	}
}

func TestTailForFollow(t *testing.T) {
	tests := []struct {
		name       string
		files      map[string]string
		n          int
		want       []string
		wantOffset int64
	}{
		{"missing", nil, 3, []string{}, 0},
		{"complete", map[string]string{"": "a\nb\n"}, 3, []string{"a", "b"}, 4},
		{"partial left to follow", map[string]string{"": "a\nb\npar"}, 2, []string{"a", "b"}, 4},
		{"only partial", map[string]string{"": "par"}, 2, []string{}, 0},
		{"n zero", map[string]string{"": "a\nb\nc"}, 0, []string{}, 4},
		{"into rotated", map[string]string{"": "b\nc", ".1": "a\n"}, 2, []string{"a", "b"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFiles(t, path, tt.files)
			got, offset, err := followStrings(context.Background(), path, tt.n, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || offset != tt.wantOffset {
				t.Errorf("TailForFollow(%d) = %q, %d; want %q, %d", tt.n, got, offset, tt.want, tt.wantOffset)
			}
		})
	}
}

func TestTailNegativeKeep(t *testing.T) {
	if _, _, err := tailStrings(context.Background(), filepath.Join(t.TempDir(), "log"), 1, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

func TestTailLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	long := strings.Repeat("x", MaxLine)
	writeFiles(t, path, map[string]string{"": "first\n" + long + "yyyy\nlast\n"})
	got, _, err := tailStrings(context.Background(), path, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{long + CutMarker, "last"}; !slices.Equal(got, want) {
		t.Errorf("Tail = %q, want %q", short(got), short(want))
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// TestTailLargeFileReadsOnlyTheEnd: the last lines of a file of several MiB
// cost a read of about their own size, not of the file.
func TestTailLargeFileReadsOnlyTheEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b bytes.Buffer
	const total = 200_000
	for i := range total {
		fmt.Fprintf(&b, "line %06d %s\n", i, strings.Repeat("-", 20))
	}
	writeFiles(t, path, map[string]string{"": b.String()})
	if b.Len() < 4<<20 {
		t.Fatalf("file is only %d bytes", b.Len())
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cr := &countingReader{r: f}
	buf := make([]byte, chunkSize)
	start, count, err := lastLines(context.Background(), cr, int64(b.Len()), 0, 100, buf)
	if err != nil || count != 100 {
		t.Fatalf("lastLines = %d, %d, %v", start, count, err)
	}
	lines, err := spanLines(span{name: path, r: cr, start: start, end: int64(b.Len())})
	if err != nil {
		t.Fatal(err)
	}
	if read := cr.n.Load(); read > 2*chunkSize {
		t.Errorf("read %d bytes of %d for 100 lines", read, b.Len())
	}

	got, _, err := tailStrings(context.Background(), path, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, lines) || len(got) != 100 || !strings.HasPrefix(got[99], fmt.Sprintf("line %06d ", total-1)) {
		t.Errorf("Tail = %q … %q", got[0], got[len(got)-1])
	}
}

// FuzzTail checks lastLines, with chunks small enough to cut lines
// anywhere and a floor anywhere, and the lines read of the span it finds,
// against splitting the content from the floor on: the first line is cut
// when the floor is inside it.
func FuzzTail(f *testing.F) {
	f.Add([]byte("a\nb\nc"), 2, 3, 0)
	f.Add([]byte("\n\n\n"), 5, 1, 0)
	f.Add([]byte("abc\n"), 1, 2, 0)
	f.Add([]byte("abc\ndef"), -1, 2, 1)
	f.Add([]byte("abc\ndef\n"), 3, 4, 4)
	f.Fuzz(func(t *testing.T, content []byte, n, bufLen, floor int) {
		n, bufLen, floor = n%20, 1+abs(bufLen)%16, abs(floor)%(len(content)+1)
		r := bytes.NewReader(content)
		buf := make([]byte, bufLen)
		end := int64(len(content))
		start, count, err := lastLines(context.Background(), r, end, int64(floor), n, buf)
		if err != nil {
			t.Fatal(err)
		}
		s := span{r: r, start: start, end: end}
		if start > 0 && start == int64(floor) {
			s.cut = content[start-1] != '\n'
		}
		got, err := spanLines(s)
		if err != nil {
			t.Fatal(err)
		}
		rest := content[floor:]
		all := strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n")
		if len(rest) == 0 {
			all = []string{}
		}
		if floor > 0 && content[floor-1] != '\n' && len(all) > 0 {
			all[0] += CutMarker
		}
		want := all
		if n >= 0 && n < len(all) {
			want = all[len(all)-n:]
		}
		if !slices.Equal(got, want) || count != len(want) {
			t.Errorf("last %d of %q from %d = %q (count %d), want %q", n, content, floor, got, count, want)
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// tailStrings is Tail's lines as strings, CutMarkers appended.
func tailStrings(ctx context.Context, path string, n, keep int) ([]string, bool, error) {
	t, err := Tail(ctx, path, n, keep)
	if err != nil {
		return nil, false, err
	}
	return t.strings(), t.Truncated(), nil
}

// followStrings is TailForFollow's lines as strings, and its offset.
func followStrings(ctx context.Context, path string, n, keep int) ([]string, int64, error) {
	t, err := TailForFollow(ctx, path, n, keep)
	if err != nil {
		return nil, 0, err
	}
	return t.strings(), t.Offset(), nil
}

// spanLines reads s as a tail does and returns its lines as strings,
// checking that the count read gives is the count Each hands out.
func spanLines(s span) ([]string, error) {
	var t Tailed
	if err := t.read(context.Background(), []span{s}); err != nil {
		return nil, err
	}
	lines := t.strings()
	if t.Len() != len(lines) {
		return nil, fmt.Errorf("read counted %d lines, Each handed out %d", t.Len(), len(lines))
	}
	return lines, nil
}
