package router

import (
	"context"

	"github.com/gpusched/gpusched/pkg/api"
)

// Hold, until the daemon's activate lands: a thaw without a hold.
func (a apiDaemon) Hold(ctx context.Context, name string, evict []string) (Hold, error) {
	p, err := a.Process(ctx, name)
	if err != nil {
		return nil, err
	}
	if p.State == api.StateRunning {
		return interimHold(p.State), nil
	}
	err = a.with(ctx, func(c *api.Client) error { _, err := c.Thaw(ctx, api.ThawParams{Name: name}); return err })
	return interimHold(p.State), err
}

type interimHold api.State

func (h interimHold) Was() api.State { return api.State(h) }
func (interimHold) Close() error     { return nil }
