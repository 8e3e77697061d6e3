package placement

import "math"

// charge is what an occupant holds on a GPU of total MiB for placement
// purposes (see the Kind docs): peaks are raised by the spike buffer and
// rounded up to whole MiB.
func charge(o Occupant, total uint64, opt Options) uint64 {
	switch o.Kind {
	case Frozen:
		return 0
	case Reservation:
		return o.DeclaredMiB
	case Filler:
		return o.UsedMiB
	case Lease:
		if o.Exclusive || o.DeclaredMiB == 0 {
			return total
		}
		return o.DeclaredMiB
	case Managed:
		if o.Exclusive {
			return total
		}
		if p := max(o.PeakMiB, o.UsedMiB); o.DeclaredMiB > 0 && p <= o.DeclaredMiB {
			return o.DeclaredMiB
		}
	}
	// External, an unknown kind, or a managed process without a
	// declaration or past it.
	return spiked(max(o.PeakMiB, o.UsedMiB), opt.SpikeBuffer)
}

// spiked is ceil(mib * (1 + buf)), without the float noise that would
// round 10000 * 1.1 up to 11001.
func spiked(mib uint64, buf float64) uint64 {
	if buf <= 0 {
		return mib
	}
	return mib + uint64(math.Ceil(float64(mib)*buf-1e-6))
}

// sub is a - b, floored at 0.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
