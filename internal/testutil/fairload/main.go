// Command fairload is the load of the fairness benchmark (BenchmarkFairness
// in internal/daemon), run as unprivileged users:
//
//	fairload hostile -socket S [-metrics ADDR] ...
//
// floods gpuschedd every way issue 20 lists at once and keeps at it,
// retrying what is refused, until SIGTERM. It prints "flooding" once every
// flood has made its first attempt, and on SIGTERM a tally of what the
// daemon granted and refused.
//
//	fairload victim -socket S
//
// runs a fixed workload (status, connect, run, freeze and thaw, logs -f)
// and prints each operation's latencies as one JSON line.
//
//	fairload burn
//
// keeps the CPUs it may use busy without calling the daemon, until SIGTERM;
// it prints "burning" once it has started.
//
//	fairload echo -socket PATH
//
// answers each line on PATH with itself until SIGTERM (the victim's
// control, -echo); it prints "serving" once it listens.
//
//	fairload refused -addr unix:PATH|tcp:ADDR -n N
//
// holds one connection, a user's share of one, then has N more refused
// (BenchmarkRefusedConnection).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fairload hostile|victim|burn|echo|refused [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "hostile":
		hostile(os.Args[2:])
	case "victim":
		victim(os.Args[2:])
	case "burn":
		burn(os.Args[2:])
	case "refused":
		refused(os.Args[2:])
	case "echo":
		echo(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "fairload: unknown role %q\n", os.Args[1])
		os.Exit(2)
	}
}
