package ramtier

import (
	"slices"
	"testing"
	"time"
)

func TestShare(t *testing.T) {
	for _, c := range []struct {
		uid      uint32
		budget   uint64
		fraction float64
		want     uint64
	}{
		{1000, 1000, 0.5, 500},
		{1000, 1000, 1, 1000},
		{1000, 3, 0.1, 1}, // at least 1 MiB
		{0, 1000, 0.5, 0}, // root: no cap
		{1000, 0, 0.5, 0}, // no budget
		{1000, 1000, 0, 0},
	} {
		if got := Share(c.uid, c.budget, c.fraction); got != c.want {
			t.Errorf("Share(%d, %d, %g) = %d, want %d", c.uid, c.budget, c.fraction, got, c.want)
		}
	}
}

func TestOverShare(t *testing.T) {
	for _, c := range []struct {
		share, held, mine, need uint64
		want                    bool
	}{
		{500, 600, 400, 200, true},  // past the share beside another's 200
		{500, 600, 300, 200, false}, // just within it
		{500, 600, 600, 200, false}, // alone in the tier: no share binds
		{0, 600, 400, 200, false},   // no cap (root, no budget, fraction 0)
		{500, 100, 0, 600, true},    // one freeze larger than the share, beside another's
	} {
		if got := OverShare(c.share, c.held, c.mine, c.need); got != c.want {
			t.Errorf("OverShare(%d, %d, %d, %d) = %v, want %v", c.share, c.held, c.mine, c.need, got, c.want)
		}
	}
}

// p is a parked process of owner, frozen at minute at, evictable.
func p(owner uint32, mib uint64, prio, at int) Parked {
	return Parked{Owner: owner, MiB: mib, Priority: prio, FrozenAt: time.Unix(int64(at)*60, 0), Evictable: true}
}

func TestOrder(t *testing.T) {
	pinned := p(1001, 500, 0, 0)
	pinned.Evictable = false
	for _, c := range []struct {
		name   string
		parked []Parked
		owner  uint32
		need   uint64
		want   []int
	}{
		{"one user: policy order, lowest priority then least recently frozen",
			[]Parked{p(1001, 100, 5, 1), p(1001, 100, 0, 3), p(1001, 100, 0, 2)}, 1001, 100, []int{2, 1, 0}},
		{"the user who holds the tier goes first, whatever their priority",
			// 1001 holds 800 at priority 50; 1002's 100 at 0 and its 200
			// more: within 1000 the level is 700, which 1001 is over.
			[]Parked{p(1001, 200, 50, 1), p(1001, 200, 50, 2), p(1002, 100, 0, 3), p(1001, 200, 50, 4), p(1001, 200, 50, 5)}, 1002, 200, []int{0, 1, 3, 4, 2}},
		{"the freezer over the level goes first too",
			[]Parked{p(1002, 100, 0, 1), p(1001, 800, 50, 2)}, 1001, 200, []int{1, 0}},
		{"two users within the level: policy order across both",
			[]Parked{p(1001, 400, 5, 1), p(1002, 400, 0, 2)}, 1003, 400, []int{1, 0}},
		{"root is never over a level; what root holds is off the users' room",
			// root 600: the users' room is 400, level 200; 1001 (300) is over.
			[]Parked{p(0, 600, 0, 1), p(1001, 300, 9, 2), p(1002, 100, 9, 3)}, 1002, 100, []int{1, 0, 2}},
		{"not evictable: never listed, still counted",
			// 1001 holds 600, 500 of it pinned: over the level of 500.
			[]Parked{pinned, p(1001, 100, 9, 1), p(1002, 100, 0, 2)}, 1002, 400, []int{1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Order(c.parked, 1000, c.owner, c.need); !slices.Equal(got, c.want) {
				t.Errorf("Order = %v, want %v", got, c.want)
			}
		})
	}
}

func TestOwnAndSums(t *testing.T) {
	pinned := p(1001, 50, 0, 0)
	pinned.Evictable = false
	parked := []Parked{p(1001, 100, 5, 1), p(1002, 200, 0, 2), pinned, p(1001, 400, 0, 3)}
	if got, want := Own(parked, 1001), []int{3, 0}; !slices.Equal(got, want) {
		t.Errorf("Own = %v, want %v", got, want)
	}
	if own, all := Room(parked, 1001); own != 500 || all != 700 {
		t.Errorf("Room = %d, %d; want 500, 700", own, all)
	}
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"Held", Held(parked, 1001), 550},
		{"Total", Total(parked), 750},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}
