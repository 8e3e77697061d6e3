// Command gpuschedd is the gpusched daemon: it owns the machine's GPUs and
// serves the JSON-lines protocol on a Unix socket. Re-executed as
// "gpusched-init", the same binary is the supervisor of one managed process
// tree; as "gpusched-exec", the stage that becomes a tree's command;
// as "gpusched-cudahelper", the process that holds the CUDA driver library;
// as "gpusched-filler", the process that holds a GPU's reserved memory;
// as "gpusched-lazypages", the page source of a lazy thaw from disk; as
// "gpusched-pageserver", the page server of one dump to disk; as
// "gpusched-logreader", the reader of a large logs reply in the caller's
// cgroups.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/daemon"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/memfill"
	"github.com/gpusched/gpusched/internal/sandbox"
)

func main() {
	if sandbox.IsSupervisor() {
		os.Exit(sandbox.Main())
	}
	if logreader.IsReader() {
		os.Exit(logreader.Main())
	}
	if sandbox.IsExecStage() {
		os.Exit(sandbox.ExecMain())
	}
	if checkpoint.IsHelper() {
		os.Exit(checkpoint.HelperMain())
	}
	if memfill.IsHelper() {
		os.Exit(memfill.HelperMain())
	}
	if checkpoint.IsPageServer() {
		os.Exit(checkpoint.PageServerMain())
	}
	if lazypages.IsServer() {
		os.Exit(lazypages.Main())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := config.Load(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, config.ErrVersion):
		fmt.Println("gpuschedd", daemon.Version)
		os.Exit(0)
	}
	if err == nil {
		var d *daemon.Daemon
		if d, err = daemon.New(cfg); err == nil {
			err = d.Run(ctx)
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "gpuschedd: %v\n", err)
		os.Exit(1)
	}
}
