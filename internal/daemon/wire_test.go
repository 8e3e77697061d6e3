package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestAnswerToAGonePeerLogsNothing: a stream whose client hung up (the
// `logs -f | head` of every day) ends without an error in the daemon's
// log; only a failure of the daemon's own is logged as one.
func TestAnswerToAGonePeerLogsNothing(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	d := &Daemon{log: zap.New(core)}
	conn, peer := net.Pipe()
	peer.Close()
	defer conn.Close()
	w := newLineWriter(conn, 4096)
	c := &call{ctx: context.Background(), method: "logs"}

	err := (&eventStream{w: w}).emit(&api.Event{Type: api.EventLog, Name: "job", Line: "a line"})
	if err == nil {
		t.Fatal("an event to a closed peer was written")
	}
	if got := d.answer(w, c, nil, nil, err); got == nil {
		t.Error("answer to a gone peer returned nil: the connection would be kept")
	}
	if n := logs.FilterMessage("request failed").Len(); n != 0 {
		t.Errorf("a client that hung up was logged as a failed request: %v", logs.All())
	}
}

// TestRefusalLineAsAnswered: the line a refused connection is sent is the
// answer lineWriter gives the same error, byte for byte, quotes and
// non-ASCII in the message included.
func TestRefusalLineAsAnswered(t *testing.T) {
	for _, err := range []error{
		errConnsFull,
		fmt.Errorf("cannot identify peer: SO_PEERCRED: %w", syscall.EBADF),
		&codedError{code: api.CodeResourceExhausted, msg: `user "ünï<x>" holds 64 connections`, base: ErrUnavailable},
	} {
		conn, peer := net.Pipe()
		go func() {
			defer conn.Close()
			code, msg := toWire(err)
			_ = newLineWriter(conn, 512).response(nil, nil, &api.Error{Code: code, Message: msg})
		}()
		answered, _ := io.ReadAll(peer)
		if got := refusalLine(err); string(got) != string(answered) {
			t.Errorf("refusalLine(%v) = %s; lineWriter wrote %s", err, got, answered)
		}
	}
}
