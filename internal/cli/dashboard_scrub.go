package cli

import (
	"context"

	"github.com/gpusched/gpusched/pkg/api"
)

// scrubbed is a dashSource whose answers have their text escaped (scrub):
// the dashboard lays out what users' processes chose (commands, reasons,
// events) on the screen of whoever runs it.
type scrubbed struct{ dashSource }

// scrubbedAnswer scrubs v when err is nil, and returns both.
func scrubbedAnswer[T any](v T, err error) (T, error) {
	if err == nil {
		scrub(&v)
	}
	return v, err
}

func (s scrubbed) PS(ctx context.Context) ([]api.Process, error) {
	return scrubbedAnswer(s.dashSource.PS(ctx))
}

func (s scrubbed) GPUs(ctx context.Context) ([]api.GPU, error) {
	return scrubbedAnswer(s.dashSource.GPUs(ctx))
}

func (s scrubbed) Jobs(ctx context.Context) ([]api.Job, error) {
	return scrubbedAnswer(s.dashSource.Jobs(ctx))
}

func (s scrubbed) Status(ctx context.Context) (*api.Status, error) {
	return scrubbedAnswer(s.dashSource.Status(ctx))
}

func (s scrubbed) Freeze(ctx context.Context, name string) (*api.CheckpointResult, error) {
	return scrubbedAnswer(s.dashSource.Freeze(ctx, name))
}

func (s scrubbed) Thaw(ctx context.Context, name string) (*api.CheckpointResult, error) {
	return scrubbedAnswer(s.dashSource.Thaw(ctx, name))
}

func (s scrubbed) Hibernate(ctx context.Context, name string) (*api.HibernateResult, error) {
	return scrubbedAnswer(s.dashSource.Hibernate(ctx, name))
}

func (s scrubbed) Kill(ctx context.Context, name string) (*api.Process, error) {
	return scrubbedAnswer(s.dashSource.Kill(ctx, name))
}

func (s scrubbed) Events(ctx context.Context, onEvent func(*api.Event) error) error {
	return s.dashSource.Events(ctx, func(e *api.Event) error {
		scrub(e)
		return onEvent(e)
	})
}
