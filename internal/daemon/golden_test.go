package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// transcriptStep is one line of a golden transcript (pkg/api/testdata/transcripts):
// a request to send on a connection, a line expected back, or a hang-up.
type transcriptStep struct {
	Note       string          `json:"note"`
	Conn       int             `json:"conn"`
	Send       json.RawMessage `json:"send"`
	SendRaw    *string         `json:"send_raw"`
	Recv       json.RawMessage `json:"recv"`
	SkipEvents bool            `json:"skip_events"` // events before the expected response are skipped
	Close      bool            `json:"close"`       // hang up the connection (a later step on it dials anew)
}

// TestGoldenTranscripts replays every transcript against a fresh daemon on
// two simulated GPUs. The Python SDK replays the same files.
func TestGoldenTranscripts(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "pkg/api/testdata/transcripts/*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no transcripts found")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".jsonl"), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) { c.CRIU = "none" }) // capabilities as without CRIU
			replay(t, h.cfg.Socket, f)
		})
	}
}

func replay(t *testing.T, socket, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	conns := map[int]*bufio.ReadWriter{}
	raw := map[int]net.Conn{}
	conn := func(n int) *bufio.ReadWriter {
		if c, ok := conns[n]; ok {
			return c
		}
		nc, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(60 * time.Second))
		t.Cleanup(func() { nc.Close() })
		rw := bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))
		conns[n], raw[n] = rw, nc
		return rw
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var s transcriptStep
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("%s:%d: %v", file, i+1, err)
		}
		if s.Close {
			if nc, ok := raw[s.Conn]; ok {
				nc.Close()
				delete(raw, s.Conn)
				delete(conns, s.Conn)
			}
			continue
		}
		rw := conn(s.Conn)
		switch {
		case s.SendRaw != nil:
			rw.WriteString(*s.SendRaw + "\n")
			rw.Flush()
		case s.Send != nil:
			var b bytes.Buffer
			json.Compact(&b, s.Send)
			rw.Write(append(b.Bytes(), '\n'))
			rw.Flush()
		case s.Recv != nil:
			var want any
			json.Unmarshal(s.Recv, &want)
			for {
				got, err := rw.ReadBytes('\n')
				if err != nil {
					t.Fatalf("%s:%d: reading response: %v", filepath.Base(file), i+1, err)
				}
				var g map[string]any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatalf("%s:%d: response %q is not JSON: %v", filepath.Base(file), i+1, got, err)
				}
				if _, isEvent := g["event"]; isEvent && s.SkipEvents {
					continue
				}
				if err := match(want, g, "$"); err != nil {
					t.Fatalf("%s:%d: %v\n got: %s", filepath.Base(file), i+1, err, got)
				}
				break
			}
		}
	}
}

// match compares a response with its expectation: objects must have the
// same keys; the strings "<any>", "<str>", "<int>", "<num>" and "<time>"
// match any value of that kind.
func match(want, got any, path string) error {
	if w, ok := want.(string); ok && strings.HasPrefix(w, "<") && strings.HasSuffix(w, ">") {
		ok := false
		switch w {
		case "<any>":
			ok = true
		case "<str>":
			_, ok = got.(string)
		case "<num>":
			_, ok = got.(float64)
		case "<int>":
			f, isNum := got.(float64)
			ok = isNum && f == math.Trunc(f)
		case "<time>":
			s, isStr := got.(string)
			_, err := time.Parse(time.RFC3339Nano, s)
			ok = isStr && err == nil
		default:
			return fmt.Errorf("%s: unknown placeholder %s", path, w)
		}
		if !ok {
			return fmt.Errorf("%s: got %v, want %s", path, got, w)
		}
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: got %v, want an object", path, got)
		}
		if k1, k2 := keys(w), keys(g); k1 != k2 {
			return fmt.Errorf("%s: keys %s, want %s", path, k2, k1)
		}
		for k := range w {
			if err := match(w[k], g[k], path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: got %v, want %d elements", path, got, len(w))
		}
		for i := range w {
			if err := match(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Errorf("%s: got %v, want %v", path, got, want)
	}
	return nil
}

func keys(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}
