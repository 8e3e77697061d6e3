package daemon

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/limits"
)

// TestBulkTurnLooksAgainWithTheTurn: two calls of a user over their CPU
// share wait for the same payoff; the first takes the turn and is charged a
// second of CPU; the second, which took the turn after it, finds the user
// over again and waits that second off instead of running at once. The
// share is one CPU (a burst of 2 s), on the real clock.
func TestBulkTurnLooksAgainWithTheTurn(t *testing.T) {
	share := limits.NewCPUShare(1)
	d := &Daemon{bulk: bulkgate.New(1).Metered(share), turns: limits.NewTurns(1)}
	const alice = 1000
	ctx := ctxT(t)
	share.Charge(alice, 2*time.Second+300*time.Millisecond) // paid off in 300 ms
	type taken struct {
		release func()
		at      time.Time
	}
	turns := make(chan taken, 2)
	for range 2 {
		go func() {
			release, err := d.bulkTurn(&call{ctx: ctx, actor: actor{UID: alice}})
			if err != nil {
				t.Error(err)
				return
			}
			turns <- taken{release, time.Now()}
		}()
	}
	first := <-turns
	share.Charge(alice, time.Second) // what the first call's work took
	released := time.Now()
	first.release()
	select {
	case second := <-turns:
		if waited := second.at.Sub(released); waited < 500*time.Millisecond {
			t.Fatalf("the second call took the turn %v after the first was charged a second over the burst; want it to wait about a second", waited)
		}
		second.release()
	case <-ctx.Done():
		t.Fatal("the second call never took its turn")
	}
}
