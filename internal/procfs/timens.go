package procfs

import (
	"bytes"
	"strconv"
)

// clockTicks is USER_HZ, the unit of start times in /proc/<pid>/stat
// (100 on every Linux architecture gpusched runs on).
const clockTicks = 100

// A process CRIU restored lives in a time namespace whose boot time is
// shifted so that its clocks go on from the dump; /proc shows it every
// start time shifted by the same offset. Start times are the half of a
// process's identity that must not depend on who reads them, so they are
// taken back to the host's clock.

// bootOffsetTicks is the calling process's boot-time offset from the
// host's, in clock ticks: 0 outside a time namespace. It is read on every
// call, since a restore moves the very process that reads it.
func bootOffsetTicks() int64 {
	b, err := ReadFile(root+"/self/timens_offsets", MaxNumbers)
	if err != nil {
		return 0
	}
	return parseBootOffset(b)
}

// parseBootOffset takes the boot-time offset out of timens_offsets
// ("boottime <secs> <nsecs>" among the clocks' lines), in clock ticks.
func parseBootOffset(b []byte) int64 {
	for line := range bytes.Lines(b) {
		var f [4][]byte
		if fields(line, f[:]) == 3 && string(f[0]) == "boottime" {
			secs, err1 := strconv.ParseInt(string(f[1]), 10, 64)
			nsecs, err2 := strconv.ParseInt(string(f[2]), 10, 64)
			if err1 == nil && err2 == nil {
				return secs*clockTicks + nsecs/(1e9/clockTicks)
			}
		}
	}
	return 0
}

// SameStart reports whether two start times, each read by ReadStat from
// whatever time namespace, name the same process start. Taking a start
// time back to the host's clock can be off by one tick (the namespace's
// offset is finer than a tick); a pid is not reused within one tick.
func SameStart(a, b uint64) bool { return a == b || a == b+1 || b == a+1 }

// hostTicks takes a start time as a reader with boot offset off sees it
// back to the host's clock.
func hostTicks(shown uint64, off int64) uint64 {
	return uint64(int64(shown) - off)
}
