package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// refused holds one connection to -addr (unix:PATH or tcp:HOST:PORT),
// which takes the share of a user whose share is one, prints "holding",
// then has -workers goroutines open -n more that the daemon refuses, each
// read to its end, and exits non-zero if any was answered otherwise (the
// socket's refusal is one line naming resource_exhausted; the metrics
// port's is a close, unanswered).
func refused(args []string) {
	fs := flag.NewFlagSet("refused", flag.ExitOnError)
	addr := fs.String("addr", "", "unix:PATH or tcp:HOST:PORT")
	n := fs.Int("n", 1000, "connections to have refused")
	workers := fs.Int("workers", 8, "connections opened at once")
	fs.Parse(args)
	network, address, _ := strings.Cut(*addr, ":")
	held, err := net.Dial(network, address)
	if err != nil {
		fail(err)
	}
	defer held.Close()
	probe := `{"method":"hello"}` + "\n"
	if network == "tcp" {
		probe = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
	}
	if _, err := io.WriteString(held, probe); err != nil {
		fail(err)
	}
	if _, err := bufio.NewReader(held).ReadString('\n'); err != nil {
		fail(fmt.Errorf("the held connection: %w", err))
	}
	fmt.Println("holding")
	var left atomic.Int64
	left.Store(int64(*n))
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	for range *workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				c, err := net.Dial(network, address)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(c) // a refusal may end in a reset
				c.Close()
				if network == "unix" && !strings.Contains(string(b), `"resource_exhausted"`) || network == "tcp" && len(b) > 0 {
					errs <- fmt.Errorf("a connection past the share was answered %q", b)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fairload refused:", err)
	os.Exit(1)
}
