package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpusched/gpusched/pkg/api"
)

// stream makes one streaming request, handing each event to onEvent, until
// the daemon ends it or Ctrl-C or SIGTERM stops it; a stopped stream
// returns an error that is context.Canceled.
func (a *app) stream(ctx context.Context, method string, params any, onEvent func(*api.Event) error, result any) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Stream(ctx, method, params, onEvent, result)
}

// writeEvent prints one event as a JSON line.
func writeEvent(w io.Writer, e *api.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
