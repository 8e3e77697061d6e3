package daemon

import (
	"context"
	"time"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/pkg/api"
)

// Checks of a command's directory and program as its user
// (sandbox.CheckCommand) run on a thread of the daemon, and a file system
// of the user's that never answers (a FUSE mount through fusermount3, a
// hung NFS server) holds that thread for good: a call waits for its check
// at most callerCheckWait, and each user has at most callerChecksPerUser
// checks unreturned, so that no user can pile up the daemon's threads
// until the Go runtime aborts it (10,000).
const (
	callerCheckWait     = 10 * time.Second
	callerChecksPerUser = 16
)

// callerChecks runs those checks, bounded.
type callerChecks struct{ turns *limits.Turns }

func newCallerChecks() callerChecks { return callerChecks{turns: limits.NewTurns(callerChecksPerUser)} }

// check checks dir and cmd0 (searched in path) as owner; what names the
// call in errors.
func (cc callerChecks) check(owner proctable.Owner, what, cmd0, path, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callerCheckWait)
	defer cancel()
	release, err := cc.turns.Take(ctx, owner.UID)
	if err != nil {
		return api.Errorf(api.CodeResourceExhausted, "%s: %d checks of paths as %s still wait on a file system that does not answer; try again once it does",
			what, callerChecksPerUser, owner.User)
	}
	done := make(chan error, 1)
	go func() {
		done <- sandbox.CheckCommand(credOf(owner), cmd0, path, dir)
		release() // only once the check has returned: its thread is free then
	}()
	select {
	case err := <-done:
		if err != nil {
			return invalidf("%s: %v", what, err)
		}
		return nil
	case <-ctx.Done():
		return api.Errorf(api.CodeTimeout, "%s: checking dir %s and command %q as %s: no answer from the file system in %v",
			what, dir, cmd0, owner.User, callerCheckWait)
	}
}
