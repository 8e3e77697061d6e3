package retention

import (
	"slices"
	"testing"
	"time"
)

func TestSelect(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const alice, bob, root = 1000, 1001, 0
	tests := []struct {
		name  string
		p     Policy
		items []Item
		drop  []int
		next  time.Time
	}{
		{name: "off keeps everything", p: Policy{},
			items: []Item{{alice, ago(1000 * time.Hour), 0}, {alice, ago(time.Hour), 0}}},
		{name: "nothing finished", p: Policy{Keep: 1, For: time.Hour}},
		{name: "count keeps the newest per user", p: Policy{Keep: 2},
			items: []Item{{alice, ago(3 * time.Hour), 0}, {alice, ago(1 * time.Hour), 0}, {alice, ago(4 * time.Hour), 0}, {alice, ago(2 * time.Hour), 0}},
			drop:  []int{0, 2}},
		{name: "one user's pile never prunes another's", p: Policy{Keep: 2},
			items: []Item{{bob, ago(9 * time.Hour), 0}, {alice, ago(1 * time.Hour), 0}, {alice, ago(2 * time.Hour), 0}, {alice, ago(3 * time.Hour), 0}, {alice, ago(4 * time.Hour), 0}, {bob, ago(8 * time.Hour), 0}},
			drop:  []int{3, 4}},
		{name: "root is held to the count too", p: Policy{Keep: 1},
			items: []Item{{root, ago(2 * time.Hour), 0}, {root, ago(time.Hour), 0}},
			drop:  []int{0}},
		{name: "equal ends: the later given is newer", p: Policy{Keep: 1},
			items: []Item{{alice, ago(time.Hour), 0}, {alice, ago(time.Hour), 0}, {alice, ago(time.Hour), 0}},
			drop:  []int{0, 1}},
		{name: "age drops what ended For ago or more", p: Policy{For: time.Hour},
			items: []Item{{alice, ago(time.Hour), 0}, {bob, ago(59 * time.Minute), 0}, {alice, ago(2 * time.Hour), 0}, {bob, ago(10 * time.Minute), 0}},
			drop:  []int{0, 2}, next: now.Add(time.Minute)},
		{name: "age and count together", p: Policy{Keep: 2, For: time.Hour},
			items: []Item{{alice, ago(30 * time.Minute), 0}, {alice, ago(20 * time.Minute), 0}, {alice, ago(10 * time.Minute), 0}, {bob, ago(90 * time.Minute), 0}},
			drop:  []int{0, 3}, next: now.Add(40 * time.Minute)},
		{name: "a record ending in the future (clock stepped back) is kept", p: Policy{For: time.Hour},
			items: []Item{{alice, now.Add(time.Hour), 0}},
			next:  now.Add(2 * time.Hour)},
		{name: "negative keep is off", p: Policy{Keep: -1},
			items: []Item{{alice, ago(time.Hour), 0}, {alice, ago(time.Hour), 0}}},
		{name: "bytes keep the newest that fit, per user", p: Policy{Bytes: 100},
			items: []Item{{alice, ago(4 * time.Hour), 10}, {alice, ago(1 * time.Hour), 60}, {bob, ago(9 * time.Hour), 90}, {alice, ago(2 * time.Hour), 40}, {alice, ago(3 * time.Hour), 1}},
			drop:  []int{0, 4}},
		{name: "bytes: one record over them all is dropped", p: Policy{Bytes: 100},
			items: []Item{{alice, ago(time.Hour), 101}, {alice, ago(2 * time.Hour), 0}},
			drop:  []int{0, 1}},
		{name: "bytes and count together", p: Policy{Keep: 1, Bytes: 100},
			items: []Item{{alice, ago(time.Hour), 0}, {alice, ago(2 * time.Hour), 0}, {bob, ago(time.Hour), 70}, {bob, ago(2 * time.Hour), 70}},
			drop:  []int{1, 3}},
		{name: "together: the one holding the most loses their oldest, to an equal share", p: Policy{Together: 100},
			items: []Item{{alice, ago(time.Hour), 60}, {alice, ago(2 * time.Hour), 50}, {bob, ago(3 * time.Hour), 30}},
			drop:  []int{1}},
		{name: "together: within it nothing goes", p: Policy{Together: 140},
			items: []Item{{alice, ago(time.Hour), 60}, {alice, ago(2 * time.Hour), 50}, {bob, ago(3 * time.Hour), 30}}},
		{name: "together: root is counted and held too", p: Policy{Together: 100},
			items: []Item{{root, ago(time.Hour), 60}, {root, ago(2 * time.Hour), 50}, {bob, ago(3 * time.Hour), 30}},
			drop:  []int{1}},
		{name: "together: a per-user cap below the share", p: Policy{Bytes: 50, Together: 1000},
			items: []Item{{alice, ago(time.Hour), 40}, {alice, ago(2 * time.Hour), 40}, {bob, ago(time.Hour), 10}},
			drop:  []int{1}},
		{name: "together: shares of what the count keeps", p: Policy{Keep: 1, Together: 50},
			items: []Item{{alice, ago(time.Hour), 40}, {alice, ago(2 * time.Hour), 40}, {bob, ago(time.Hour), 20}},
			drop:  []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drop, next := Select(now, tt.p, tt.items)
			if !slices.Equal(drop, tt.drop) || !next.Equal(tt.next) {
				t.Fatalf("Select = %v, next %v; want %v, next %v", drop, next, tt.drop, tt.next)
			}
		})
	}
}

// TestSelectKeepsInputIntact: Select reads items and orders only its own
// index lists.
func TestSelectKeepsInputIntact(t *testing.T) {
	now := time.Unix(1e9, 0)
	items := []Item{{1, now.Add(-3 * time.Second), 0}, {1, now.Add(-time.Second), 0}, {1, now.Add(-2 * time.Second), 0}}
	before := slices.Clone(items)
	Select(now, Policy{Keep: 1}, items)
	if !slices.Equal(items, before) {
		t.Fatalf("items changed: %v, was %v", items, before)
	}
}
