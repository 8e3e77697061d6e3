package router

import (
	"context"

	"github.com/gpusched/gpusched/pkg/api"
)

// Hold activates name with hold on a connection of its own, which the
// returned Hold closes.
func (a apiDaemon) Hold(ctx context.Context, name string, evict []string) (Hold, error) {
	c, err := api.Dial(ctx, a.socket)
	if err != nil {
		return nil, err
	}
	act, err := c.Hold(ctx, api.ActivateParams{Name: name, Evict: evict})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &apiHold{c: c, was: act.Was}, nil
}

// apiHold is a held activation: its connection.
type apiHold struct {
	c   *api.Client
	was api.State
}

func (h *apiHold) Was() api.State { return h.was }
func (h *apiHold) Close() error   { return h.c.Close() }
