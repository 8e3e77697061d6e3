// Command gpusched-router routes OpenAI- and Anthropic-compatible requests
// to models that gpuschedd runs, freezes and thaws; everything it does
// lives in internal/router.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpusched/gpusched/internal/router"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := router.Main(ctx, os.Args[1:], os.Stderr)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintf(os.Stderr, "gpusched-router: %v\n", err)
		os.Exit(1)
	}
}
