package netguard

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unixListener listens on a fresh socket that Close leaves in place, as
// the daemon's does.
func unixListener(t *testing.T) *net.UnixListener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	return ln
}

func dialUnix(t *testing.T, a net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", a.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAcceptorRefusesWithItsLine: connections the verdict refuses are
// sent its line and closed, and Accept returns the next one it admits, a
// working *net.UnixConn, with the verdict's value; the peer's credentials
// are there for the verdict to read.
func TestAcceptorRefusesWithItsLine(t *testing.T) {
	var seen atomic.Int32
	verdict := func(fd int) (int32, []byte, bool) {
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil || int(cred.Pid) != unix.Getpid() {
			t.Errorf("the verdict's descriptor: peer %+v, %v", cred, err)
		}
		n := seen.Add(1)
		return n, []byte("no\n"), n > 3
	}
	a, err := Take(unixListener(t), verdict, func(int32) { t.Error("undo of a connection made a net.Conn") })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var refused []net.Conn
	for range 3 {
		refused = append(refused, dialUnix(t, a.Addr()))
	}
	admitted := dialUnix(t, a.Addr())
	c, v, err := a.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.UnixConn); !ok || v != 4 {
		t.Fatalf("Accept: %T with %d; want a *net.UnixConn with the fourth verdict's 4", c, v)
	}
	for i, r := range refused {
		if b, err := io.ReadAll(r); string(b) != "no\n" || err != nil {
			t.Errorf("refused connection %d read %q, %v; want the refusal, then the end", i+1, b, err)
		}
	}
	if _, err := c.Write([]byte("yes\n")); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 4); func() error { _, err := io.ReadFull(admitted, b); return err }() != nil || string(b) != "yes\n" {
		t.Fatalf("the admitted connection read %q", b)
	}
}

// TestAcceptorCloseEndsAccept: Close ends an Accept waiting for a
// connection, and one in the middle of refusing a flood of them.
func TestAcceptorCloseEndsAccept(t *testing.T) {
	for _, flood := range []bool{false, true} {
		a, err := Take(unixListener(t), func(int) (struct{}, []byte, bool) { return struct{}{}, nil, false }, func(struct{}) {})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		floods := make(chan struct{})
		if flood {
			go func() {
				defer close(floods)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c, err := net.Dial("unix", a.Addr().String()); err == nil {
						c.Close()
					}
				}
			}()
		} else {
			close(floods)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := a.Accept()
			done <- err
		}()
		a.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("flood %v: Accept after Close: %v; want net.ErrClosed", flood, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("flood %v: Accept did not return after Close", flood)
		}
		close(stop)
		<-floods
	}
}

// TestAcceptorUndoesAnAdmissionItCannotServe: an admitted connection that
// cannot be made a net.Conn (out of descriptors) is closed, its admission
// given back through undo, and the error returned; the next one is served.
func TestAcceptorUndoesAnAdmissionItCannotServe(t *testing.T) {
	var undone []int
	n := 0
	a, err := Take(unixListener(t), func(int) (int, []byte, bool) { n++; return n, nil, true }, func(v int) { undone = append(undone, v) })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	orig := fileConn
	fileConn = func(fd int) (net.Conn, error) {
		fileConn = orig
		unix.Close(fd)
		return nil, unix.EMFILE
	}
	defer func() { fileConn = orig }()
	lost := dialUnix(t, a.Addr())
	if _, _, err := a.Accept(); !errors.Is(err, unix.EMFILE) {
		t.Fatalf("Accept out of descriptors: %v", err)
	}
	if len(undone) != 1 || undone[0] != 1 {
		t.Fatalf("undone %v; want the first admission", undone)
	}
	if b, err := io.ReadAll(lost); len(b) != 0 || err != nil {
		t.Fatalf("the lost connection read %q, %v; want its end", b, err)
	}
	dialUnix(t, a.Addr())
	c, v, err := a.Accept()
	if err != nil || v != 2 {
		t.Fatalf("the next Accept: %d, %v", v, err)
	}
	c.Close()
}

// TestAcceptorTakesTCP: a TCP listener's connections come as
// *net.TCPConns, and its address stays the acceptor's.
func TestAcceptorTakesTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	a, err := Take(ln.(*net.TCPListener), func(int) (bool, []byte, bool) { return true, nil, true }, func(bool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Addr().String() != addr {
		t.Fatalf("Addr %s; want %s", a.Addr(), addr)
	}
	cc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c, _, err := a.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok || c.RemoteAddr().String() != cc.LocalAddr().String() {
		t.Fatalf("Accept: %T from %s; want a *net.TCPConn from %s", c, c.RemoteAddr(), cc.LocalAddr())
	}
}
