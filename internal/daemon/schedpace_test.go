package daemon

import (
	"testing"
	"time"
)

// TestPassPace: the first pass starts at once; after a pass that spent d
// placing, the next waits until 3d after it ended, so that passes kicked
// back to back take a quarter of a CPU; a pass that took no time leaves no
// rest.
func TestPassPace(t *testing.T) {
	var p passPace
	end := time.Unix(1000, 0)
	if w := p.wait(end); w != 0 {
		t.Fatalf("first pass waits %v", w)
	}
	p.placed(100*time.Millisecond, end)
	for _, c := range []struct{ after, want time.Duration }{
		{0, 300 * time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond},
		{300 * time.Millisecond, 0},
		{time.Hour, 0},
	} {
		if w := p.wait(end.Add(c.after)); w != c.want {
			t.Errorf("%v after a pass of 100ms: waits %v, want %v", c.after, w, c.want)
		}
	}
	// Kicked back to back: each pass begins when its rest ends.
	var busy, span time.Duration
	at := end
	for range 10 {
		at = at.Add(p.wait(at))
		took := 50 * time.Millisecond
		at = at.Add(took)
		busy += took
		p.placed(took, at)
	}
	span = at.Sub(end)
	if share := float64(busy) / float64(span); share > 0.26 {
		t.Errorf("passes kicked back to back took %.2f of the time, want at most a quarter", share)
	}
	p.placed(0, at)
	if w := p.wait(at); w != 0 {
		t.Errorf("after a pass of nothing: waits %v", w)
	}
}
