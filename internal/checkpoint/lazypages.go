package checkpoint

import (
	"context"
	"fmt"

	"github.com/gpusched/gpusched/internal/execx"
)

// probeLazy asks whether CRIU here can restore lazily: the kernel's
// userfaultfd with the non-cooperative events a lazy restore needs (`criu
// check --feature uffd-noncoop`, criu/cr-check.c).
func (c *CRIU) probeLazy(ctx context.Context) error {
	_, err := execx.Run(ctx, execx.Cmd{Path: c.path, Args: []string{"--libdir", noPlugins, "check", "--feature", "uffd-noncoop"}, Env: c.env(nil)})
	if err != nil {
		return fmt.Errorf("criu check --feature uffd-noncoop: %w: %v", ErrUnsupported, err)
	}
	return nil
}
