package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuslice"
	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

// Op is one operation's latencies in a victim run, in milliseconds.
type Op struct {
	Op  string  `json:"op"`
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// Times holds each call's start and end on CLOCK_MONOTONIC, the
	// clock of a Go execution trace's timestamps, in ns (-times).
	Times [][2]int64 `json:"times,omitempty"`
	// Slowest is where the slowest call spent its time, in ms, where the
	// daemon tells it (freeze+thaw: each half as the client saw it, and
	// the steps the daemon timed, "freeze.lock" and the like).
	Slowest map[string]float64 `json:"slowest,omitempty"`
}

// victim runs the fixed workload of a well-behaved user and prints its
// latencies: status on one connection, hello on a connection of its own,
// run of a sleeping process, a freeze and thaw of a simulated GPU job, and
// logs -f until the first line. With -echo, each status call is followed
// by a round trip of a line of the same length to fairload echo (op
// "echo"), the control sampled over the same seconds.
func victim(args []string) {
	fs := flag.NewFlagSet("victim", flag.ExitOnError)
	var (
		socket   = fs.String("socket", "", "gpuschedd socket")
		simjob   = fs.String("simjob", "", "gpusched-simjob binary")
		statuses = fs.Int("status", 2000, "status calls")
		every    = fs.Duration("status-every", time.Millisecond, "pause between status calls, so that they sample the whole of a flood's first seconds (0: back to back, in about 50 ms)")
		connects = fs.Int("connects", 200, "calls on a connection of their own (dial, hello, close), as each CLI command makes")
		runs     = fs.Int("runs", 20, "runs")
		swaps    = fs.Int("swaps", 10, "freeze and thaw round trips")
		follows  = fs.Int("follows", 20, "logs -f calls")
		times    = fs.Bool("times", false, "report each status call's start and end (CLOCK_MONOTONIC ns), to match with a trace of the daemon")
		echoPath = fs.String("echo", "", "fairload echo's socket: a round trip there after each status call")
		slice    = fs.Duration("slice", 0, "ask the kernel for this scheduler slice on every thread (0: the kernel's default), as a latency-sensitive client may")
	)
	fs.Parse(args)
	ctx := context.Background()
	if *slice > 0 {
		must(cpuslice.Keep(ctx, *slice, 100*time.Millisecond))
	}
	c, err := api.Dial(ctx, *socket)
	must(err)
	defer c.Close()
	var ops []Op
	var spans [][2]int64
	status := &latencies{name: "status"}
	echo := &latencies{name: "echo"}
	var echoConn *bufio.ReadWriter
	if *echoPath != "" {
		conn, err := net.Dial("unix", *echoPath)
		must(err)
		defer conn.Close()
		echoConn = bufio.NewReadWriter(bufio.NewReaderSize(conn, echoBuffer), bufio.NewWriterSize(conn, echoBuffer))
	}
	var line []byte
	for i := range *statuses {
		if i > 0 && *every > 0 {
			time.Sleep(*every)
		}
		var st *api.Status
		status.time(func() error {
			t0 := monotonic()
			var err error
			st, err = c.Status(ctx)
			if *times {
				spans = append(spans, [2]int64{t0, monotonic()})
			}
			return err
		})
		if echoConn == nil {
			continue
		}
		if line == nil {
			line, err = json.Marshal(st)
			must(err)
			line = append(line, '\n')
		}
		echo.time(func() error { return roundTrip(echoConn, line) })
	}
	ops = append(ops, status.op())
	ops[0].Times = spans
	if echoConn != nil {
		ops = append(ops, echo.op())
	}
	ops = append(ops, timed("connect", *connects, *every, func(int) error {
		c, err := api.Dial(ctx, *socket)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Hello(ctx)
		return err
	}))
	ops = append(ops, timed("run", *runs, 0, func(i int) error {
		_, err := c.Run(ctx, api.RunParams{Name: fmt.Sprintf("victim-%d", i), Cmd: []string{"sleep", "100000"}, Dir: "/"})
		return err
	}))
	for i := range *runs {
		name := fmt.Sprintf("victim-%d", i)
		_, err := c.Kill(ctx, api.KillParams{Name: name, Signal: "KILL"})
		must(err)
		_, err = c.Wait(ctx, api.WaitParams{Name: name}, nil)
		must(err)
		_, err = c.Rm(ctx, name)
		must(err)
	}
	_, err = c.Run(ctx, api.RunParams{Name: "victim-gpu", Cmd: []string{*simjob, "--vram", "1000"}, Dir: "/", GPU: &api.GPURef{Index: 0}})
	must(err)
	must(followOnce(ctx, *socket, "victim-gpu", "simjob: allocated"))
	var slowest map[string]float64
	swap := timed("freeze+thaw", *swaps, 0, func(int) error {
		parts := map[string]float64{}
		t0 := time.Now()
		froze, err := c.Freeze(ctx, api.FreezeParams{Name: "victim-gpu"})
		if err != nil {
			return err
		}
		t1 := time.Now()
		thawed, err := c.Thaw(ctx, api.ThawParams{Name: "victim-gpu"})
		parts["freeze"], parts["thaw"] = ms(t1.Sub(t0)), ms(time.Since(t1))
		for half, res := range map[string]*api.CheckpointResult{"freeze": froze, "thaw": thawed} {
			if res != nil {
				for step, v := range res.MS {
					parts[half+"."+step] = v
				}
			}
		}
		if slowest == nil || parts["freeze"]+parts["thaw"] > slowest["freeze"]+slowest["thaw"] {
			slowest = parts
		}
		return err
	})
	swap.Slowest = slowest
	ops = append(ops, swap)
	_, err = c.Run(ctx, api.RunParams{Name: "victim-talker", Cmd: []string{"sh", "-c", "echo hello; exec sleep 100000"}, Dir: "/"})
	must(err)
	ops = append(ops, timed("logs-f", *follows, 0, func(int) error { return followOnce(ctx, *socket, "victim-talker", "hello") }))
	for _, name := range []string{"victim-gpu", "victim-talker"} {
		_, err := c.Kill(ctx, api.KillParams{Name: name, Signal: "KILL"})
		must(err)
		_, err = c.Wait(ctx, api.WaitParams{Name: name}, nil)
		must(err)
		_, err = c.Rm(ctx, name)
		must(err)
	}
	must(json.NewEncoder(os.Stdout).Encode(ops))
}

// errStop ends a follow once its line came.
var errStop = errors.New("stop")

// followOnce follows name's log on a connection of its own (a follow cut
// short closes it) until a line starts with want.
func followOnce(ctx context.Context, socket, name, want string) error {
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	err = c.FollowLogs(ctx, name, 100, func(line string) error {
		if strings.HasPrefix(line, want) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// roundTrip writes line (ending in a newline) and reads it back.
func roundTrip(rw *bufio.ReadWriter, line []byte) error {
	if _, err := rw.Write(line); err != nil {
		return err
	}
	if err := rw.Flush(); err != nil {
		return err
	}
	back, err := rw.ReadSlice('\n')
	if err == nil && len(back) != len(line) {
		err = fmt.Errorf("echo: %d bytes back for %d", len(back), len(line))
	}
	return err
}

// timed runs op n times, pause apart, and summarises its latencies; a
// follow ended by errStop counts as done.
func timed(name string, n int, pause time.Duration, op func(i int) error) Op {
	l := &latencies{name: name}
	for i := range n {
		if i > 0 && pause > 0 {
			time.Sleep(pause)
		}
		l.time(func() error { return op(i) })
	}
	return l.op()
}

// latencies gathers one operation's latencies, in milliseconds.
type latencies struct {
	name string
	ms   []float64
}

// time runs op and records how long it took; an error ends the victim.
func (l *latencies) time(op func() error) {
	t0 := time.Now()
	if err := op(); err != nil {
		fmt.Fprintf(os.Stderr, "fairload victim: %s: %v\n", l.name, err)
		os.Exit(1)
	}
	l.ms = append(l.ms, ms(time.Since(t0)))
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// op summarises the latencies gathered (none gathered: all zero).
func (l *latencies) op() Op {
	lat := slices.Sorted(slices.Values(l.ms))
	return Op{Op: l.name, N: len(lat), P50: rank.Percentile(lat, 50), P99: rank.Percentile(lat, 99), Max: rank.Percentile(lat, 100)}
}

// monotonic is CLOCK_MONOTONIC in ns.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairload victim:", err)
		os.Exit(1)
	}
}
