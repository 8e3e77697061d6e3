package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

func main() {
	// In a managed tree, /proc is of the tree's PID namespace; the job
	// reports host pids, as NVML does, from the host's.
	if dir := os.Getenv(simgpu.EnvDir); dir != "" {
		procfs.UseHostProc(simgpu.HostProc(dir))
	}
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
