package main

import (
	"bufio"
	"bytes"
	"net"
	"testing"
)

// TestEchoLinesWritesEachLineBack: the control answers every line with
// itself, a status reply's length and far longer, on one connection, and
// the victim's round trip reads each back whole.
func TestEchoLinesWritesEachLineBack(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go echoLines(server)
	rw := bufio.NewReadWriter(bufio.NewReaderSize(client, echoBuffer), bufio.NewWriterSize(client, echoBuffer))
	for _, n := range []int{1, 300, 5000, 100 << 10} {
		line := append(bytes.Repeat([]byte("x"), n), '\n')
		if err := roundTrip(rw, line); err != nil {
			t.Fatalf("a line of %d bytes: %v", n, err)
		}
	}
}
