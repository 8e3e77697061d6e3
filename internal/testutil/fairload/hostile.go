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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func hostile(args []string) {
	fs := flag.NewFlagSet("hostile", flag.ExitOnError)
	var (
		socket      = fs.String("socket", "", "gpuschedd socket")
		metrics     = fs.String("metrics", "", "metrics host:port; empty: no metrics flood")
		metricConns = fs.Int("metrics-conns", 2000, "idle keep-alive connections to hold on the metrics port")
		conns       = fs.Int("conns", 2000, "idle connections to hold on the socket")
		follows     = fs.Int("follows", 60, "logs -f streams to hold (the readers take the rest of the default cap of 64)")
		procs       = fs.Int("procs", 400, "managed processes to start")
		jobs        = fs.Int("jobs", 20000, "jobs to queue")
		readers     = fs.Int("readers", 4, "callers asking for every line of a 60 MiB log of newlines, in a loop")
		refollowers = fs.Int("refollowers", 0, "callers following every line of an exited process's log of 100,000 short lines (logs -f -n -1), in a loop")
		pollers     = fs.Int("pollers", 0, "callers asking for status, a quick call, in a loop")
		churners    = fs.Int("churners", 0, "callers opening a connection, saying hello and closing it, in a loop, never pausing")
		respawners  = fs.Int("respawners", 0, "callers starting a process (with -cmd-bytes of command line), killing and removing it, in a loop")
		cmdBytes    = fs.Int("cmd-bytes", 250<<10, "bytes of command line per process record")
		jobBytes    = fs.Int("job-cmd-bytes", 100, "bytes of command line per job: small, so that the queue reaches its cap (10,000 by default) in batches of 1,000")
	)
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	f := &flooder{socket: *socket}
	var first sync.WaitGroup
	floods := []struct {
		name string
		run  func(ctx context.Context, started func())
	}{
		{"metrics", func(ctx context.Context, s func()) { f.metricsFlood(ctx, *metrics, *metricConns, s) }},
		{"procs", func(ctx context.Context, s func()) { f.procFlood(ctx, *procs, *cmdBytes, s) }},
		{"follows", func(ctx context.Context, s func()) { f.followFlood(ctx, *follows, s) }},
		{"jobs", func(ctx context.Context, s func()) { f.jobFlood(ctx, *jobs, *jobBytes, s) }},
		{"leases", func(ctx context.Context, s func()) { f.leaseFlood(ctx, s) }},
		{"fill", func(ctx context.Context, s func()) { f.fillFlood(ctx, s) }},
		{"reads", func(ctx context.Context, s func()) { f.readFlood(ctx, *readers, s) }},
		{"refollows", func(ctx context.Context, s func()) { f.refollowFlood(ctx, *refollowers, s) }},
		{"polls", func(ctx context.Context, s func()) { f.pollFlood(ctx, *pollers, s) }},
		{"churns", func(ctx context.Context, s func()) { f.churnFlood(ctx, *churners, s) }},
		{"respawns", func(ctx context.Context, s func()) { f.respawnFlood(ctx, *respawners, *cmdBytes, s) }},
	}
	var all sync.WaitGroup
	for _, fl := range floods {
		first.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			var once sync.Once
			fl.run(ctx, func() { once.Do(first.Done) })
			once.Do(first.Done)
		}()
	}
	first.Wait()
	// Last, the idle connections take every slot the others left.
	first.Add(1)
	all.Add(1)
	go func() {
		defer all.Done()
		var once sync.Once
		f.connFlood(ctx, *conns, func() { once.Do(first.Done) })
		once.Do(first.Done)
	}()
	first.Wait()
	fmt.Println("flooding")
	all.Wait()
	for _, name := range []string{"metrics", "procs", "follows", "jobs", "leases", "fill", "reads", "refollows", "polls", "churns", "respawns", "conns"} {
		t := f.tally(name)
		fmt.Printf("%s: %d granted, %d refused\n", name, t.granted.Load(), t.refused.Load())
	}
}

// retry is how long a refused flood waits before it tries again: it keeps
// at the caps without spinning (an attacker's own CPU spent on a small
// benchmark machine would measure the machine, not the daemon).
const retry = time.Second

type tally struct{ granted, refused atomic.Int64 }

func (t *tally) count(err error) bool {
	if err != nil {
		t.refused.Add(1)
		return false
	}
	t.granted.Add(1)
	return true
}

type flooder struct {
	socket  string
	mu      sync.Mutex
	tallies map[string]*tally
}

func (f *flooder) tally(name string) *tally {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tallies == nil {
		f.tallies = map[string]*tally{}
	}
	if f.tallies[name] == nil {
		f.tallies[name] = &tally{}
	}
	return f.tallies[name]
}

func (f *flooder) dial(ctx context.Context) (*api.Client, error) { return api.Dial(ctx, f.socket) }

// padded is argv with arguments of up to 100 KiB added (under execve's
// 128 KiB a string) to make about n bytes in all.
func padded(n int, argv ...string) []string {
	for left := n - 64; left > 0; left -= 100 << 10 {
		argv = append(argv, strings.Repeat("x", min(left, 100<<10)))
	}
	return argv
}

// each runs fn(i) for i in 0..n-1, each in a goroutine of its own and
// again after pause until ctx ends, and returns once they have all stopped.
func each(ctx context.Context, n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fn(i)
				pause(ctx)
			}
		}()
	}
	wg.Wait()
}

// pause waits retry, or until ctx ends (false).
func pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(retry):
		return true
	}
}

// metricsFlood holds n keep-alive connections open on the metrics port, each
// having sent one complete request, reopening any the daemon closes.
func (f *flooder) metricsFlood(ctx context.Context, addr string, n int, started func()) {
	if addr == "" {
		return
	}
	t := f.tally("metrics")
	each(ctx, n, func(i int) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if i == n-1 {
			started()
		}
		if !t.count(err) {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		r := bufio.NewReader(c)
		for {
			if _, err := r.ReadByte(); err != nil {
				return // closed by the daemon (or by ctx): reopen
			}
		}
	})
}

// connFlood holds n idle connections on the socket.
func (f *flooder) connFlood(ctx context.Context, n int, started func()) {
	t := f.tally("conns")
	each(ctx, n, func(i int) {
		c, err := f.dial(ctx)
		if err == nil {
			defer c.Close()
			_, err = c.Hello(ctx) // a refused connection answers its first request with the refusal
		}
		if i == n-1 {
			started()
		}
		if t.count(err) {
			<-ctx.Done()
		}
	})
}

// procFlood starts n sleeping processes with cmdBytes of command line each,
// then keeps retrying the refused ones.
func (f *flooder) procFlood(ctx context.Context, n, cmdBytes int, started func()) {
	t := f.tally("procs")
	c, err := f.dial(ctx)
	if err != nil {
		t.count(err)
		return
	}
	defer c.Close()
	cmd := padded(cmdBytes, "sh", "-c", "exec sleep 100000", "sh")
	for ctx.Err() == nil {
		for i := range n {
			_, err := c.Run(ctx, api.RunParams{Name: fmt.Sprintf("hostile-%d", i), Cmd: cmd, Dir: "/"})
			if err != nil && strings.Contains(err.Error(), "exists") {
				continue
			}
			t.count(err)
		}
		started()
		if !pause(ctx) {
			return
		}
	}
}

// followFlood keeps n logs -f streams open on one of its processes.
func (f *flooder) followFlood(ctx context.Context, n int, started func()) {
	t := f.tally("follows")
	c, err := f.dial(ctx)
	if err == nil {
		_, err = c.Run(ctx, api.RunParams{Name: "hostile-talker", Cmd: []string{"sh", "-c", "while :; do echo chatter; sleep 1; done"}, Dir: "/"})
		c.Close()
	}
	if !t.count(err) {
		return
	}
	each(ctx, n, func(i int) {
		c, err := f.dial(ctx)
		if err != nil {
			t.count(err)
			return
		}
		defer c.Close()
		var once sync.Once
		first := func() {
			once.Do(func() {
				if i == n-1 {
					started()
				}
			})
		}
		err = c.FollowLogs(ctx, "hostile-talker", 1, func(string) error { first(); return nil })
		first()
		t.count(err)
	})
}

// jobFlood queues n jobs, in batches, that wait behind its leases: at the
// highest priority the daemon takes, and on at every cap.
func (f *flooder) jobFlood(ctx context.Context, n, cmdBytes int, started func()) {
	t := f.tally("jobs")
	c, err := f.dial(ctx)
	if err != nil {
		t.count(err)
		return
	}
	defer c.Close()
	// As many jobs of cmdBytes each as fit in a request line.
	batch := max(1, min(1000, (api.MaxLineBytes-4096)/(cmdBytes+256)))
	cmd := padded(cmdBytes, "true")
	specs := make([]api.JobSpec, batch)
	for i := range specs {
		specs[i] = api.JobSpec{Cmd: cmd, Dir: "/", GPUs: 2, Priority: 1000}
	}
	for queued := 0; ctx.Err() == nil; {
		if queued >= n {
			started()
			<-ctx.Done()
			return
		}
		_, err := c.Submit(ctx, api.SubmitParams{Jobs: specs})
		if t.count(err) {
			queued += batch
			continue
		}
		if specs[0].Priority > 0 && strings.Contains(err.Error(), "priority") {
			for i := range specs {
				specs[i].Priority = 0
			}
			continue
		}
		if len(specs[0].Cmd) > 1 && strings.Contains(err.Error(), "bytes") {
			// Out of room for big commands: on with small ones, to the count.
			specs = make([]api.JobSpec, 1000)
			for i := range specs {
				specs[i] = api.JobSpec{Cmd: []string{"true"}, Dir: "/", GPUs: 2}
			}
			continue
		}
		started()
		pause(ctx)
	}
}

// leaseFlood holds leases on every GPU, at the highest priority allowed.
func (f *flooder) leaseFlood(ctx context.Context, started func()) {
	t := f.tally("leases")
	for _, prio := range []int{1000, 100, 0} {
		c, err := f.dial(ctx)
		if err != nil {
			t.count(err)
			return
		}
		_, err = c.Acquire(ctx, api.AcquireParams{GPUs: 2, Priority: prio, Timeout: api.Duration(10 * time.Second)})
		if t.count(err) {
			started()
			<-ctx.Done()
			c.Close()
			return
		}
		c.Close()
	}
}

// fillFlood asks for every GPU filled to the brim.
func (f *flooder) fillFlood(ctx context.Context, started func()) {
	t := f.tally("fill")
	c, err := f.dial(ctx)
	if err != nil {
		t.count(err)
		return
	}
	defer c.Close()
	for i := range 2 {
		_, err := c.Fill(ctx, api.FillParams{GPU: &api.GPURef{Index: i}, Ratio: 1})
		if !t.count(err) {
			_, err = c.Fill(ctx, api.FillParams{GPU: &api.GPURef{Index: i}, Ratio: 0.5})
			t.count(err)
		}
	}
	started()
}

// readFlood has a process write 60 MiB of newlines, then asks for all of its
// lines from n callers in a loop.
func (f *flooder) readFlood(ctx context.Context, n int, started func()) {
	t := f.tally("reads")
	c, err := f.dial(ctx)
	if err != nil {
		t.count(err)
		return
	}
	_, err = c.Run(ctx, api.RunParams{Name: "hostile-newlines", Dir: "/",
		Cmd: []string{"sh", "-c", "head -c 62914560 /dev/zero | tr '\\0' '\\n'; exec sleep 100000"}})
	c.Close()
	if !t.count(err) {
		return
	}
	f.eachConn(ctx, n, t, func(_ int, c *api.Client) {
		for ctx.Err() == nil {
			_, err := c.Logs(ctx, "hostile-newlines", -1)
			started()
			if !t.count(err) && !errors.Is(err, context.Canceled) {
				pause(ctx)
			}
		}
	})
}

// refollowFlood follows every line of an exited process's log of short
// lines from n connections, each in a loop: a follow that starts with the
// most lines a follow sends, and ends once they are sent.
func (f *flooder) refollowFlood(ctx context.Context, n int, started func()) {
	t := f.tally("refollows")
	if n == 0 {
		return
	}
	c, err := f.dial(ctx)
	if err == nil {
		_, err = c.Run(ctx, api.RunParams{Name: "hostile-counted", Dir: "/", Cmd: []string{"seq", "100000"}})
		if err == nil {
			_, err = c.Wait(ctx, api.WaitParams{Name: "hostile-counted"}, nil)
		}
		c.Close()
	}
	if !t.count(err) {
		return
	}
	f.eachConn(ctx, n, t, func(_ int, c *api.Client) {
		for ctx.Err() == nil {
			err := c.FollowLogs(ctx, "hostile-counted", -1, func(string) error { return nil })
			started()
			if !t.count(err) && !errors.Is(err, context.Canceled) {
				pause(ctx)
			}
		}
	})
}

// pollFlood asks for status from n connections, each in a loop: quick
// calls, as fast as the daemon answers them.
func (f *flooder) pollFlood(ctx context.Context, n int, started func()) {
	t := f.tally("polls")
	f.eachConn(ctx, n, t, func(_ int, c *api.Client) {
		for ctx.Err() == nil {
			_, err := c.Status(ctx)
			started()
			if !t.count(err) && !errors.Is(err, context.Canceled) {
				pause(ctx)
			}
		}
	})
}

// eachConn runs fn for n callers at once, each with its index and a
// connection of its own; a dial that fails counts as refused in t.
func (f *flooder) eachConn(ctx context.Context, n int, t *tally, fn func(i int, c *api.Client)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := f.dial(ctx)
			if err != nil {
				t.count(err)
				return
			}
			defer c.Close()
			fn(i, c)
		})
	}
	wg.Wait()
}

// churnFlood opens connections from n callers, each in a loop without a
// pause, saying hello on each and closing it: what a shell loop of CLI
// calls does, as fast as the daemon accepts.
func (f *flooder) churnFlood(ctx context.Context, n int, started func()) {
	t := f.tally("churns")
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := f.dial(ctx)
				if err == nil {
					_, err = c.Hello(ctx)
					c.Close()
				}
				started()
				t.count(err)
			}
		})
	}
	wg.Wait()
}

// respawnFlood starts a process with cmdBytes of command line from each
// of n callers, kills it, waits for it and removes it, in a loop: within
// every cap, as fast as the daemon goes.
func (f *flooder) respawnFlood(ctx context.Context, n, cmdBytes int, started func()) {
	t := f.tally("respawns")
	cmd := padded(cmdBytes, "sh", "-c", "exec sleep 100000", "sh")
	f.eachConn(ctx, n, t, func(i int, c *api.Client) {
		name := fmt.Sprintf("hostile-respawn-%d", i)
		for ctx.Err() == nil {
			_, err := c.Run(ctx, api.RunParams{Name: name, Cmd: cmd, Dir: "/"})
			if err == nil {
				_, err = c.Kill(ctx, api.KillParams{Name: name, Signal: "KILL"})
			}
			if err == nil {
				_, err = c.Wait(ctx, api.WaitParams{Name: name}, nil)
			}
			if err == nil {
				_, err = c.Rm(ctx, name)
			}
			started()
			if !t.count(err) && ctx.Err() == nil {
				c.Rm(ctx, name) // what the failed step left
				pause(ctx)
			}
		}
	})
}
