package router

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"go.uber.org/zap"
)

// DefaultListen is where the router listens without --listen: loopback
// only, as an unauthenticated router should.
const DefaultListen = "127.0.0.1:8080"

// Main is gpusched-router: flags, config, then Serve until ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpusched-router", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "TOML config `FILE` with a [models.NAME] table per model (docs/router.md)")
	listen := fs.String("listen", DefaultListen, "`ADDR`ESS to serve HTTP on")
	socket := fs.String("socket", "", "the daemon's socket `PATH` (default: $GPUSCHED_SOCKET, else /run/gpusched/gpusched.sock)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *config == "" {
		return errors.New("--config FILE is required")
	}
	cfg, err := LoadConfig(*config)
	if err != nil {
		return err
	}
	logger, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer logger.Sync()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopProfile, err := startProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	return New(cfg, NewDaemon(*socket), logger).Serve(ctx, ln)
}
