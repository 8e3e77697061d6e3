package logfile

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// collect feeds chunks to a lineBuf and returns the lines, final one included.
func collect(chunks ...[]byte) []string {
	var lb lineBuf
	lines := []string{}
	emit := func(l string) error { lines = append(lines, l); return nil }
	for _, c := range chunks {
		lb.feed(c, emit)
	}
	lb.flush(emit)
	return lines
}

func TestLineBufCut(t *testing.T) {
	long := strings.Repeat("x", MaxLine)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{}},
		{"empty lines", "\n\n", []string{"", ""}},
		{"final unterminated", "a\nb", []string{"a", "b"}},
		{"exactly MaxLine", long + "\nz\n", []string{long, "z"}},
		{"one byte over", long + "y\nz\n", []string{long + CutMarker, "z"}},
		{"far over, unterminated", long + long + "yyy", []string{long + CutMarker}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := collect([]byte(tt.in)); !slices.Equal(got, tt.want) {
				t.Errorf("lines = %q, want %q", short(got), short(tt.want))
			}
		})
	}
}

// TestLineBufChunking: how the stream is chunked never changes the lines.
func TestLineBufChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var in []byte
		for range rng.IntN(20) {
			in = append(in, bytes.Repeat([]byte{'a' + byte(rng.IntN(3))}, rng.IntN(MaxLine/4*5))...)
			if rng.IntN(4) > 0 {
				in = append(in, '\n')
			}
		}
		whole := collect(in)
		var chunks [][]byte
		for rest := in; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(MaxLine/2))
			chunks, rest = append(chunks, rest[:k]), rest[k:]
		}
		if got := collect(chunks...); !slices.Equal(got, whole) {
			t.Fatalf("chunked lines differ from whole: %d vs %d lines", len(got), len(whole))
		}
	}
}

// short abbreviates long lines in failure messages.
func short(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > 40 {
			l = l[:20] + "…" + l[len(l)-20:]
		}
		out[i] = l
	}
	return out
}
