package cli

import (
	"context"
	"errors"
	"sync"

	"github.com/gpusched/gpusched/pkg/api"
)

// dashSource is everything the dashboard reads from and does to the daemon.
// apiSource implements it over pkg/api's client; the tests use a fake.
type dashSource interface {
	PS(ctx context.Context) ([]api.Process, error)
	GPUs(ctx context.Context) ([]api.GPU, error)
	Jobs(ctx context.Context) ([]api.Job, error)
	Status(ctx context.Context) (*api.Status, error)
	Freeze(ctx context.Context, name string) (*api.CheckpointResult, error)
	Thaw(ctx context.Context, name string) (*api.CheckpointResult, error)
	Hibernate(ctx context.Context, name string) (*api.HibernateResult, error)
	Kill(ctx context.Context, name string) (*api.Process, error)
	// Events hands every event of the caller's events stream to onEvent
	// until the stream ends, onEvent fails or ctx ends.
	Events(ctx context.Context, onEvent func(*api.Event) error) error
}

// apiSource is the daemon behind pkg/api's client. Queries share one
// connection, dialled again after it broke; each action and each events
// stream gets its own connection, so that a slow freeze or the endless
// events stream never holds up a refresh.
type apiSource struct {
	dial func(context.Context) (*api.Client, error)

	mu sync.Mutex
	c  *api.Client // the query connection; nil until dialled or after it broke
}

// query runs f on the query connection.
func (s *apiSource) query(ctx context.Context, f func(*api.Client) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		c, err := s.dial(ctx)
		if err != nil {
			return err
		}
		s.c = c
	}
	err := f(s.c)
	var wire *api.Error
	if err != nil && !errors.As(err, &wire) {
		// Not the daemon's answer: the connection may be unusable now.
		_ = s.c.Close()
		s.c = nil
	}
	return err
}

// once runs f on a connection of its own.
func (s *apiSource) once(ctx context.Context, f func(*api.Client) error) error {
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// Close closes the query connection.
func (s *apiSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return nil
	}
	err := s.c.Close()
	s.c = nil
	return err
}

func (s *apiSource) PS(ctx context.Context) (out []api.Process, err error) {
	err = s.query(ctx, func(c *api.Client) error { out, err = c.PS(ctx, api.PSParams{}); return err })
	return out, err
}

func (s *apiSource) GPUs(ctx context.Context) (out []api.GPU, err error) {
	err = s.query(ctx, func(c *api.Client) error { out, err = c.GPUs(ctx); return err })
	return out, err
}

func (s *apiSource) Jobs(ctx context.Context) (out []api.Job, err error) {
	err = s.query(ctx, func(c *api.Client) error { out, err = c.Jobs(ctx, api.JobsParams{}); return err })
	return out, err
}

func (s *apiSource) Status(ctx context.Context) (out *api.Status, err error) {
	err = s.query(ctx, func(c *api.Client) error { out, err = c.Status(ctx); return err })
	return out, err
}

func (s *apiSource) Freeze(ctx context.Context, name string) (out *api.CheckpointResult, err error) {
	err = s.once(ctx, func(c *api.Client) error { out, err = c.Freeze(ctx, api.FreezeParams{Name: name}); return err })
	return out, err
}

func (s *apiSource) Thaw(ctx context.Context, name string) (out *api.CheckpointResult, err error) {
	err = s.once(ctx, func(c *api.Client) error { out, err = c.Thaw(ctx, api.ThawParams{Name: name}); return err })
	return out, err
}

func (s *apiSource) Hibernate(ctx context.Context, name string) (out *api.HibernateResult, err error) {
	err = s.once(ctx, func(c *api.Client) error { out, err = c.Hibernate(ctx, api.HibernateParams{Name: name}); return err })
	return out, err
}

func (s *apiSource) Kill(ctx context.Context, name string) (out *api.Process, err error) {
	err = s.once(ctx, func(c *api.Client) error { out, err = c.Kill(ctx, api.KillParams{Name: name}); return err })
	return out, err
}

func (s *apiSource) Events(ctx context.Context, onEvent func(*api.Event) error) error {
	return s.once(ctx, func(c *api.Client) error { return c.Events(ctx, api.EventsParams{}, onEvent) })
}
