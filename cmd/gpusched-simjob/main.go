// Command gpusched-simjob is a simulated GPU job: a real process that holds
// simulated VRAM in the simgpu registry (and optionally real host memory with
// a verifiable pattern), so that placement, attribution, freeze/thaw and OOM
// handling can be tested without a GPU.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpusched-simjob:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, os.Stdout, os.Stderr))
}
