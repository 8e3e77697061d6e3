package daemon

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestStopWhileSystemdDoesNotRead: a daemon whose NOTIFY_SOCKET nobody
// reads any more (its queue full: a wedged manager, or a test's receiver
// that stopped at READY=1) still stops on SIGTERM, and its managed
// process keeps running for the next daemon. BenchmarkRouter saw the
// daemon outlive SIGTERM: its STOPPING=1 waited for room in a queue
// filled by its STATUS= lines.
func TestStopWhileSystemdDoesNotRead(t *testing.T) {
	h := prepareHarness(t)
	path := filepath.Join(h.dir, "notify.sock")
	rx, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	dp := h.spawnBinary(exec.Command(h.bins.Daemon, h.binaryArgs()...), "NOTIFY_SOCKET="+path)
	rx.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("waiting for READY=1: %v", err)
		}
		if slices.Contains(strings.Split(string(buf[:n]), "\n"), "READY=1") {
			break
		}
	}
	p := h.run("survivor", "sleep", "1000")
	t.Cleanup(func() { unix.Kill(p.InitPID, unix.SIGKILL) })
	fillQueue(t, path)

	if err := dp.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dp.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("daemon exit: %v\n%s", err, dp.stderr)
		}
	case <-time.After(testutil.StopGrace):
		dp.cmd.Process.Signal(unix.SIGQUIT) // its goroutines, into its stderr
		<-exited
		t.Fatalf("the daemon still ran %v after SIGTERM:\n%s", testutil.StopGrace, dp.stderr)
	}
	if err := unix.Kill(p.PID, 0); err != nil {
		t.Fatalf("the managed process died with the daemon: %v", err)
	}
}

// fillQueue sends datagrams to the Unix datagram socket at path until its
// receive queue takes no more, as the queue of a reader that stopped.
func fillQueue(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	for range 100000 {
		_, err := unix.Write(fd, []byte("X_FILLER=1"))
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s: its queue never filled", path)
}
