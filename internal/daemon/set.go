package daemon

import (
	"fmt"
	"time"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// set changes a live process's disk-tier policy.
func (d *Daemon) set(c *call) (any, error) {
	var p api.SetParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	rec, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	if !rec.Live() {
		return nil, conflictf("process %q already exited", p.Name)
	}
	pol := rec.Policy
	if p.Priority != nil && *p.Priority != pol.Priority {
		if err := d.checkUserPriority(c.actor, fmt.Sprintf("set %q", p.Name), *p.Priority); err != nil {
			return nil, err
		}
		pol.Priority = *p.Priority
	}
	if p.Pin != nil {
		pol.Pin = *p.Pin
	}
	if p.TTL != nil {
		pol.TTL = *p.TTL
	}
	if p.Idle != nil {
		pol.Idle = *p.Idle
	}
	if err := checkPolicy(c.actor, fmt.Sprintf("set %q", p.Name), pol, rec.Policy); err != nil {
		return nil, err
	}
	out, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.Policy = pol
		return nil
	})
	if err != nil {
		return nil, err
	}
	return toAPI(out, d.gpuView()), nil
}

// checkPolicy validates a policy a caller asks for (was: what it replaces).
// Raising a priority above 0 or pinning, which let a process keep host RAM
// others might need, is root's to do.
func checkPolicy(a actor, what string, pol, was api.Policy) error {
	switch {
	case pol.TTL < 0 || pol.Idle < 0:
		return invalidf("%s: ttl and idle must not be negative", what)
	case pol.Priority < -1000 || pol.Priority > 1000:
		return invalidf("%s: priority %d is outside -1000..1000", what, pol.Priority)
	case pol.TTL > 0 && time.Duration(pol.TTL) < policyTick || pol.Idle > 0 && time.Duration(pol.Idle) < policyTick:
		return invalidf("%s: ttl and idle must be at least %v", what, policyTick)
	case a.root():
		return nil
	case pol.Priority > 0 && pol.Priority != was.Priority:
		return deniedf("%s: priority above 0 needs root", what)
	case pol.Pin && !was.Pin:
		return deniedf("%s: pinning needs root", what)
	}
	return nil
}
