package daemon

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"time"
)

// An idle daemon does not place again: a pass costs time in the size of
// the queue (about half a second at 100,000 queued jobs), and a GPU sample
// comes every --gpu-poll. A sample alone triggers a pass only when what
// placement reads of it changed: a GPU's memory, its processes and their
// memory, which managed tree they belong to, a GPU lost or sampling
// failing; and utilization, power and temperature only while a health
// filter reads them. Everything else that placement reads kicks the
// scheduler itself (kick). With nothing changed a pass still runs every
// idleRepass (or AgingStep, or StarveAfter, when shorter), for aging and
// starvation, which move with the clock alone.
const idleRepass = 30 * time.Second

// idleState is what the scheduler loop keeps of its last pass.
type idleState struct {
	digest uint64
	at     time.Time
}

// needPass reports whether the loop, woken at now, must place again, and
// if so records the pass as begun.
func (d *Daemon) needPass(s *idleState, now time.Time) bool {
	digest := sampleDigest(d.gpuView(), d.healthWatched())
	dirty := d.sched.dirty.Swap(false)
	if !dirty && digest == s.digest && now.Sub(s.at) < d.repassEvery() {
		return false
	}
	s.digest, s.at = digest, now
	return true
}

// repassEvery is the longest an idle scheduler goes without a pass.
func (d *Daemon) repassEvery() time.Duration {
	every := idleRepass
	for _, t := range []time.Duration{d.cfg.AgingStep, d.cfg.StarveAfter} {
		if t > 0 && t < every {
			every = t
		}
	}
	return every
}

// healthWatched reports whether a health filter on utilization, power or
// temperature is in use: configured, or asked for by a pending lease.
func (d *Daemon) healthWatched() bool {
	c := d.cfg
	return c.MaxUtilPercent > 0 || c.MaxPowerWatts > 0 || c.MaxTempC > 0 || d.leases.watchHealth()
}

// digestSeed keys sampleDigest for the daemon's lifetime.
var digestSeed = maphash.MakeSeed()

// sampleDigest sums up what placement reads of a sample. Lists and maps are
// combined in any order (a sum of their entries' hashes).
func sampleDigest(gv *gpuView, health bool) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	entry := func(parts ...any) uint64 {
		var e maphash.Hash
		e.SetSeed(digestSeed)
		for _, p := range parts {
			switch v := p.(type) {
			case string:
				e.WriteString(v)
				e.WriteByte(0)
			case uint64:
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], v)
				e.Write(b[:])
			}
		}
		return e.Sum64()
	}
	var sum uint64
	h.WriteString(gv.stale)
	for _, dv := range gv.devices {
		parts := []any{dv.UUID, uint64(dv.Index), dv.TotalMiB, dv.UsedMiB, gv.lost[dv.UUID]}
		if health {
			parts = append(parts, optInt(dv.UtilPercent), optFloat(dv.PowerWatts), optInt(dv.TempC))
		}
		sum += entry(parts...)
	}
	for _, p := range gv.procs {
		sum += entry("proc", uint64(p.PID), p.UUID, p.UsedMiB, gv.owner[p.PID])
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], sum)
	h.Write(b[:])
	return h.Sum64()
}

// optInt and optFloat encode a measurement that may be missing.
func optInt(p *int) uint64 {
	if p == nil {
		return math.MaxUint64
	}
	return uint64(*p)
}

func optFloat(p *float64) uint64 {
	if p == nil {
		return math.MaxUint64
	}
	return math.Float64bits(*p)
}
