package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpusched-simjob:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, os.Stdout, os.Stderr))
}
