package logreply

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestEventsAsEncodingJSON: the lines Events hands out are, byte for byte,
// the daemon's event lines (prefix, encoding/json's event, "}\n"), a chunk
// of at most Chunk lines a call; empty lines, cut lines and odd bytes
// included.
func TestEventsAsEncodingJSON(t *testing.T) {
	const name = "job \"1\" <b>"
	prefix := []byte(`{"id":"a\"b","event":`)
	forOddTails(t, func(lines []string, cut bool, tl *logfile.Tailed) {
		var want []byte
		for _, l := range lines {
			want = append(append(append(want, prefix...), jsonOf(t, api.Event{Type: api.EventLog, Name: name, Line: l})...), "}\n"...)
		}
		var got []byte
		sends := 0
		err := Events(prefix, name, tl, func(b []byte) error {
			sends++
			if c := bytes.Count(b, []byte("\n")); c > Chunk || c == 0 {
				t.Fatalf("%d lines: a chunk of %d", len(lines), c)
			}
			got = append(got, b...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d lines, cut %v: Events differs from encoding/json\n got %.300s\nwant %.300s", len(lines), cut, got, want)
		}
		if want := (len(lines) + Chunk - 1) / Chunk; sends != want {
			t.Fatalf("%d lines: sent %d times, want %d", len(lines), sends, want)
		}
	})
}

// TestEventsStopsAtSendsError: the first failed send ends Events.
func TestEventsStopsAtSendsError(t *testing.T) {
	lines := make([]string, 3*Chunk)
	for i := range lines {
		lines[i] = "line"
	}
	gone := errors.New("gone")
	sends := 0
	err := Events(nil, "x", tailOf(t, "", lines), func([]byte) error { sends++; return gone })
	if !errors.Is(err, gone) || sends != 1 {
		t.Fatalf("Events = %v after %d sends, want %v after 1", err, sends, gone)
	}
}

// TestAppendEventOfAString: a line given as a string (a follow's, with any
// CutMarker in it) is encoded as encoding/json encodes its event.
func TestAppendEventOfAString(t *testing.T) {
	head := EventHead([]byte(`{"id":1,"event":`), "job")
	for _, l := range []string{"", "plain", "tab\tnul\x00", "bad \xff", "sep \u2028", "<&>", "cut" + logfile.CutMarker} {
		want := append(append([]byte(`{"id":1,"event":`), jsonOf(t, api.Event{Type: api.EventLog, Name: "job", Line: l})...), "}\n"...)
		if got := AppendEvent(nil, head, l, false); !bytes.Equal(got, want) {
			t.Errorf("AppendEvent(%q) = %s, want %s", l, got, want)
		}
	}
}
