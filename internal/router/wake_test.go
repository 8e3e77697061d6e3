package router

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/pkg/api"
)

// noRoomDaemon answers a cold start that there is no room, and lets every
// later call run into the caller's deadline, as a dial does when the start
// timeout ends just before it.
type noRoomDaemon struct {
	Daemon
	refused bool
}

func (d *noRoomDaemon) Process(ctx context.Context, name string) (*api.Process, error) {
	if !d.refused {
		return &api.Process{Name: name, State: api.StateExited}, nil
	}
	<-ctx.Done()
	return nil, fmt.Errorf("connect to gpusched: %w", os.ErrDeadlineExceeded)
}

func (d *noRoomDaemon) Run(context.Context, api.RunParams) (*api.Process, error) {
	d.refused = true
	return nil, api.Errorf(api.CodeResourceExhausted, "no room on GPU 0")
}

// TestWakeTimeoutAfterNoRoomSaysNoRoom: when the start timeout runs out
// inside a call after the daemon said there is no room, the wake fails
// with no room, not with the call's timeout.
func TestWakeTimeoutAfterNoRoomSaysNoRoom(t *testing.T) {
	cfg := &Config{StartTimeout: 200 * time.Millisecond, Models: map[string]*Model{
		"alpha": {Name: "alpha", Cmd: []string{"serve"}, Health: DefaultHealth},
	}}
	r := New(cfg, &noRoomDaemon{}, zap.NewNop())
	_, err := r.wake(r.models["alpha"], &wakeCall{done: make(chan struct{})})
	if !errors.Is(err, errNoRoom) {
		t.Fatalf("wake: %v; want no room", err)
	}
}
