package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamTurnsPerUser: a user whose quick calls take all their turns
// (--max-busy-per-user) waits for one; another user and root do not wait
// behind them. Here the test holds alice's one turn, as a call of hers that
// takes long would.
func TestRedTeamTurnsPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, "gsturn-a", "gsturn"), testutil.NewUser(t, "gsturn-b", "gsturn")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsturn"; c.Limits.TurnsPerUser = 1 })
	a, b := h.rawAsUser(alice), h.rawAsUser(bob)
	release, err := h.d.turns.Take(context.Background(), alice.UID)
	if err != nil {
		t.Fatal(err)
	}
	a.send(`{"id":1,"method":"status"}`)
	if r := b.call(api.MethodStatus, nil); r["ok"] != true {
		t.Fatalf("bob's status while alice's turn is taken: %v", r)
	}
	if _, err := h.client().Status(ctxT(t)); err != nil {
		t.Fatalf("root's status while alice's turn is taken: %v", err)
	}
	// Alice's call waits for her turn: nothing comes while it is held.
	if err := a.silentFor(300 * time.Millisecond); err != nil {
		t.Fatalf("alice's status while her only turn was held: %v", err)
	}
	release()
	if r := a.recv(); r["ok"] != true {
		t.Fatalf("alice's status once her turn is free: %v", r)
	}
}
