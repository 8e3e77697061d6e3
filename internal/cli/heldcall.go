package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpusched/gpusched/pkg/api"
)

// heldCall is a call whose result lives as long as its connection (a
// lease, a session filler): held ends on Ctrl-C or SIGTERM.
type heldCall struct {
	held context.Context
	stop context.CancelFunc
	c    *api.Client
	raw  json.RawMessage
}

// callHeld dials, calls method and decodes its result into out, keeping
// the connection. waiting says what an interrupt cut short. The caller
// closes the call.
func (a *app) callHeld(ctx context.Context, method string, params, out any, waiting string) (*heldCall, error) {
	h := &heldCall{}
	h.held, h.stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	c, err := a.dial(h.held)
	if err != nil {
		h.stop()
		return nil, err
	}
	h.c = c
	if err := c.Call(h.held, method, params, &h.raw); err != nil {
		h.close()
		if errors.Is(err, context.Canceled) {
			return nil, errors.New("interrupted while " + waiting)
		}
		return nil, err
	}
	if err := json.Unmarshal(h.raw, out); err != nil {
		h.close()
		return nil, fmt.Errorf("decode %s result: %w", method, err)
	}
	return h, nil
}

func (h *heldCall) close() {
	h.c.Close()
	h.stop()
}
