package daemon

import (
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// onChange publishes table changes in order; it runs under the table lock.
func (d *Daemon) onChange(c proctable.Change) {
	d.mpsChange(c)
	d.activeChange(c)
	if c.New != nil && !c.New.Live() && (c.Old == nil || c.Old.Live()) {
		d.kickRetention()
	}
	if e, ok := d.eventOf(c); ok {
		e.Time = time.Now()
		d.events.publish(e)
		d.sched.kick()
		d.fillers.kick()
	}
}

// eventOwner is whose process or job e is about (0 and "" for neither).
func eventOwner(e *api.Event) (uint32, string) {
	switch {
	case e.Process != nil:
		return e.Process.UID, e.Process.User
	case e.Job != nil:
		return e.Job.UID, e.Job.User
	}
	return 0, ""
}

// visibleTo reports whether a may see e: events about processes, jobs and
// leases only go to their owners (and root).
func visibleTo(a actor, e *api.Event) bool {
	switch {
	case e.Process != nil:
		return a.owns(e.Process.UID)
	case e.Job != nil:
		return a.owns(e.Job.UID)
	case e.Lease != nil:
		return a.owns(e.Lease.UID)
	}
	return true
}

// subscribe streams events the caller may see until the caller leaves.
func (d *Daemon) subscribe(c *call, stream *eventStream) (any, error) {
	var p api.EventsParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	filter, err := parseNameFilter(p.Name)
	if err != nil {
		return nil, invalidf("events: %v", err)
	}
	sub, cancel := d.events.subscribe(func(e *api.Event) bool {
		uid, user := eventOwner(e)
		return filter.match(e.Name, uid, user) && visibleTo(c.actor, e)
	})
	defer cancel()
	if err := stream.emit(&api.Event{Type: api.EventSubscribed, Time: time.Now(), Name: p.Name}); err != nil {
		return nil, err
	}
	for {
		select {
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		case e, ok := <-sub.ch:
			if !ok {
				if d.events.fellBehind(sub) {
					return nil, api.Errorf(api.CodeUnavailable, "event stream fell more than %d events behind; subscribe again", subscriberBuffer)
				}
				return nil, api.Errorf(api.CodeUnavailable, "event stream closed")
			}
			if err := stream.emit(&e); err != nil {
				return nil, err
			}
		}
	}
}
