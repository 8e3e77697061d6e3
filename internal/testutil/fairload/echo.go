package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// echo serves a Unix socket that answers each line with itself, until
// SIGTERM: the least any Go server of lines does for a call, run beside
// the daemon. The victim's round trips to it (-echo) are the control
// that tells what the machine's scheduler alone adds to a call's tail.
// It prints "serving" once the socket takes connections.
func echo(args []string) {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	path := fs.String("socket", "", "socket to serve (made 0666)")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	l, err := net.Listen("unix", *path)
	if err == nil {
		err = os.Chmod(*path, 0o666)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairload echo:", err)
		os.Exit(1)
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	fmt.Println("serving")
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err == nil {
			go echoLines(c)
		}
	}
}

// echoBuffer holds the longest line echoed: a status reply is a few KiB.
const echoBuffer = 1 << 20

// echoLines writes each line read from c back to it.
func echoLines(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, echoBuffer)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		if _, err := c.Write(line); err != nil {
			return
		}
	}
}
