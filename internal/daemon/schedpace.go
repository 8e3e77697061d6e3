package daemon

import "time"

// passRest is how long the scheduler rests after a pass, as a multiple of
// the pass's time (from the bulk gate's grant: the wait for a slot is not
// the pass's): passes take at most a quarter of one
// CPU however often they are kicked. A pass is the daemon's own work,
// charged to no user, and costs time in the size of the queue (about half
// a second at 100,000 queued jobs); every change kicks one, so one user's
// cheap changes, each held to their share, kicked passes over everyone's
// queue back to back. Kicks during the rest coalesce into one pass.
const passRest = 3

// passPace is when the scheduler may place again.
type passPace struct{ next time.Time }

// wait is how long a loop woken at now waits before its next pass.
func (p *passPace) wait(now time.Time) time.Duration { return max(p.next.Sub(now), 0) }

// placed records a pass that took took, ending at end.
func (p *passPace) placed(took time.Duration, end time.Time) { p.next = end.Add(passRest * took) }
