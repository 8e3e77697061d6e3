package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/pkg/api"
)

// listOf is a listing of n processes, each with a command of cmdBytes.
func listOf(gate bulkGate, n, cmdBytes int) *listReply {
	cmd := []string{strings.Repeat("c", cmdBytes)}
	return &listReply{ctx: context.Background(), gate: gate, uid: 1000, fields: []listField{{"processes", func(yield func(any) bool) {
		for i := range n {
			if !yield(api.Process{Name: fmt.Sprintf("p%04d", i), Cmd: cmd}) {
				return
			}
		}
	}}}}
}

// countReader counts what it reads.
type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestListingWrittenInPieces: a listing longer than a piece sends its
// first piece, then waits for the bulk gate (held here by another user's
// work) before encoding the next; once admitted it finishes the one line,
// whole and in order.
func TestListingWrittenInPieces(t *testing.T) {
	gate := bulkgate.New(1)
	held, err := gate.Enter(context.Background(), 2000)
	if err != nil {
		t.Fatal(err)
	}
	conn, peer := net.Pipe()
	defer conn.Close()
	defer peer.Close()
	w := newLineWriter(conn, 4096)
	const n = 200
	done := make(chan error, 1)
	go func() { done <- w.response(json.RawMessage("7"), listOf(gate, n, 1000), nil) }()

	var got atomic.Int64 // bytes the peer has read
	lines := make(chan []byte, 1)
	go func() {
		line, _ := bufio.NewReader(countReader{peer, &got}).ReadBytes('\n')
		lines <- line
	}()
	ctx := ctxT(t)
	for gate.Waiting() == 0 || got.Load() < listPiece { // a piece sent, the listing at the gate for the next
		if ctx.Err() != nil {
			t.Fatalf("the listing never waited for the bulk gate with a piece sent (%d bytes read)", got.Load())
		}
		runtime.Gosched()
	}
	held.Leave()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var line struct {
		ID     int          `json:"id"`
		OK     bool         `json:"ok"`
		Result api.PSResult `json:"result"`
	}
	if err := json.Unmarshal(<-lines, &line); err != nil {
		t.Fatalf("the line: %v", err)
	}
	if line.ID != 7 || !line.OK || len(line.Result.Processes) != n {
		t.Fatalf("id %d, ok %v, %d processes; want 7, true, %d", line.ID, line.OK, len(line.Result.Processes), n)
	}
	for i, p := range line.Result.Processes {
		if want := fmt.Sprintf("p%04d", i); p.Name != want {
			t.Fatalf("process %d is %s, want %s", i, p.Name, want)
		}
	}
}

// TestListingMemoryIsAPiece: a listing of 8 MB is held a piece at a
// time (at most a piece and a record, whatever the line's length), not
// whole; a peer gone part way ends the connection (an error), not a line
// the next reply would follow.
func TestListingMemoryIsAPiece(t *testing.T) {
	const n, cmd = 2000, 4000
	record := len(fmt.Sprintf(`{"cmd":[%q]}`, strings.Repeat("c", cmd))) + 1024 // and its other fields
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	total, pieces := 0, 0
	check := func() {
		if out.Len() > listPiece+record {
			t.Fatalf("%d bytes held at once, over a piece (%d) and a record (%d)", out.Len(), listPiece, record)
		}
		total += out.Len()
		out.Reset()
	}
	if err := listOf(bulkgate.New(1), n, cmd).encode(enc, &out, func() error { check(); pieces++; return nil }); err != nil {
		t.Fatal(err)
	}
	check()
	if total < n*cmd || pieces < total/(listPiece+record) {
		t.Errorf("%d bytes in %d pieces; want over %d, in pieces of at most %d", total, pieces, n*cmd, listPiece+record)
	}

	gone, cut := net.Pipe()
	defer gone.Close()
	w := newLineWriter(gone, 4096)
	go func() {
		io.ReadFull(cut, make([]byte, listPiece))
		cut.Close()
	}()
	if err := w.response(nil, listOf(bulkgate.New(1), n, cmd), nil); err == nil {
		t.Error("a listing to a peer gone part way was answered as written")
	}
}
