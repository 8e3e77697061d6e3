// Command tracesplit says where the time of one user's calls went, from an
// execution trace of gpuschedd (GPUSCHED_TRACE; BenchmarkFairness
// -fairness.trace writes one). It finds the connections on which a user
// made at least -min calls of method -op (the daemon logs each
// connection's uid and makes each unary call a region), and for each, in
// the order they opened, splits the slowest -slow of those calls by the
// state of the connection's goroutine: running, runnable (and what the Ps
// ran meanwhile), in a system call, blocked (and where). Given the
// client's own start and end of each call (-victim: fairload victim
// -times, as the benchmark writes them beside the trace, on the clock the
// trace uses), it also splits each call into sent to the daemon's
// goroutine woken, woken to reply written, and written to the client done,
// and says who woke the goroutine: a thread that had been waiting (on the
// network, or for work), or one already running while no thread waited on
// the network, which the runtime polls only between goroutines then.
//
// It is a debugging tool, a module of its own so that the daemon's build
// does not depend on golang.org/x/exp.
//
//	go run . -victim T.victim1,T.victim2,T.victim3 T
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	op := flag.String("op", "status", "the method whose calls to split")
	minCalls := flag.Int("min", 400, "calls of -op a connection must have had")
	slow := flag.Float64("slow", 0.01, "the slowest fraction of calls to split")
	victim := flag.String("victim", "", "the client's call times, one file per connection in order (comma-separated)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracesplit [flags] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	m, err := load(f, *op)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("trace: %.1f s; %d stop-the-worlds (%.1f ms), %d GC mark phases (%.1f ms)\n",
		float64(m.end-m.start)/1e9, len(m.stw), total(m.stw)/1e6, len(m.mark), total(m.mark)/1e6)
	var files []string
	if *victim != "" {
		files = strings.Split(*victim, ",")
	}
	for i, g := range m.connsWith(*op, *minCalls) {
		c := m.calls(g, *op)
		fmt.Printf("\nuid %s, connection %d (at %.1f s): %d %s calls\n", g.uid, i+1, float64(c[0].start-m.start)/1e9, len(c), *op)
		m.splitDaemon(g, c, *slow)
		if i < len(files) {
			if err := m.splitClient(g, c, files[i], *slow); err != nil {
				fmt.Println("  client times:", err)
			}
		}
		m.cpuOf(g, c[0].start, c[len(c)-1].end)
	}
}
