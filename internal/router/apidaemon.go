package router

import (
	"context"

	"github.com/gpusched/gpusched/pkg/api"
)

// apiDaemon is the Daemon over pkg/api: one connection per call (a Unix
// socket dial costs microseconds, and calls then never queue behind each
// other), and one per Hold, which occupies its connection.
type apiDaemon struct{ socket string }

// NewDaemon returns the Daemon that serves the socket at path (see
// api.SocketPath).
func NewDaemon(socket string) Daemon { return apiDaemon{socket: socket} }

func (a apiDaemon) with(ctx context.Context, fn func(*api.Client) error) error {
	c, err := api.Dial(ctx, a.socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

func (a apiDaemon) Process(ctx context.Context, name string) (p *api.Process, err error) {
	err = a.with(ctx, func(c *api.Client) error { p, err = c.Process(ctx, name); return err })
	return p, err
}

func (a apiDaemon) PS(ctx context.Context) (ps []api.Process, err error) {
	err = a.with(ctx, func(c *api.Client) error { ps, err = c.PS(ctx, api.PSParams{}); return err })
	return ps, err
}

func (a apiDaemon) Run(ctx context.Context, rp api.RunParams) (p *api.Process, err error) {
	err = a.with(ctx, func(c *api.Client) error { p, err = c.Run(ctx, rp); return err })
	return p, err
}

func (a apiDaemon) Set(ctx context.Context, sp api.SetParams) error {
	return a.with(ctx, func(c *api.Client) error { _, err := c.Set(ctx, sp); return err })
}

func (a apiDaemon) Kill(ctx context.Context, name string) error {
	return a.with(ctx, func(c *api.Client) error { _, err := c.Kill(ctx, api.KillParams{Name: name}); return err })
}

func (a apiDaemon) Freeze(ctx context.Context, name string) error {
	return a.with(ctx, func(c *api.Client) error { _, err := c.Freeze(ctx, api.FreezeParams{Name: name}); return err })
}

func (a apiDaemon) GPUs(ctx context.Context) (g []api.GPU, err error) {
	err = a.with(ctx, func(c *api.Client) error { g, err = c.GPUs(ctx); return err })
	return g, err
}

func (a apiDaemon) Logs(ctx context.Context, name string, lines int) (l []string, err error) {
	err = a.with(ctx, func(c *api.Client) error { l, err = c.Logs(ctx, name, lines); return err })
	return l, err
}
