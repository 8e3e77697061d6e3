// Package schedwait records the kernel's scheduler events (tracefs:
// sched_switch, sched_waking, sched_wakeup) and says how long chosen
// threads waited for a CPU once runnable, who woke them, and behind what:
// whether a CPU was idle when they were woken, what ran on the CPU they
// were queued on. It tells what
// `perf sched` would, without perf, on machines that lack it, such as a
// lent GPU host (BenchmarkFairness -fairness.sched).
package schedwait

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Tracefs is where the kernel's tracing filesystem is mounted.
const Tracefs = "/sys/kernel/tracing"

// Mount mounts the kernel's tracing filesystem at root unless it is
// mounted there already: a machine may boot without it, as the lent GPU
// hosts do (found 2026-11-27: no /sys/kernel/tracing/instances).
func Mount(root string) error {
	if _, err := os.Stat(filepath.Join(root, "instances")); err == nil {
		return nil
	}
	if err := unix.Mount("tracefs", root, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("schedwait: mount tracefs on %s: %w", root, err)
	}
	return nil
}

// events are the scheduler events a Recording enables.
var events = []string{"sched:sched_switch", "sched:sched_waking", "sched:sched_wakeup"}

// Recording is a tracefs instance of its own recording the scheduler's
// events on every CPU, timestamped on CLOCK_MONOTONIC.
type Recording struct{ dir string }

// Start creates a tracefs instance under root (Tracefs) with bufferKiB of
// ring buffer per CPU, kept from its start (a full buffer drops the newest
// events, counted in Stop's Lost), and starts recording.
func Start(root string, bufferKiB int) (*Recording, error) {
	dir := filepath.Join(root, "instances", fmt.Sprintf("gpusched-schedwait-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("schedwait: %w", err)
	}
	r := &Recording{dir: dir}
	settings := [][2]string{
		{"tracing_on", "0"},
		{"buffer_size_kb", strconv.Itoa(bufferKiB)},
		{"trace_clock", "mono"},
		{"options/record-tgid", "1"},
		{"options/overwrite", "0"},
		{"set_event", strings.Join(events, "\n")},
		{"tracing_on", "1"},
	}
	for _, s := range settings {
		if err := os.WriteFile(filepath.Join(dir, s[0]), []byte(s[1]+"\n"), 0); err != nil {
			r.Close()
			return nil, fmt.Errorf("schedwait: %w", err)
		}
	}
	return r, nil
}

// Stop stops recording, parses what was recorded, keeping the waits of
// threads whose name keep accepts, and removes the instance.
func (r *Recording) Stop(keep func(comm string) bool) (*Trace, error) {
	defer r.Close()
	if err := os.WriteFile(filepath.Join(r.dir, "tracing_on"), []byte("0\n"), 0); err != nil {
		return nil, fmt.Errorf("schedwait: %w", err)
	}
	f, err := os.Open(filepath.Join(r.dir, "trace"))
	if err != nil {
		return nil, fmt.Errorf("schedwait: %w", err)
	}
	defer f.Close()
	t, err := Parse(f, keep)
	if err != nil {
		return nil, err
	}
	t.Lost += r.dropped()
	return t, nil
}

// dropped sums the events each CPU's full buffer did not take.
func (r *Recording) dropped() int {
	cpus, _ := filepath.Glob(filepath.Join(r.dir, "per_cpu", "cpu*", "stats"))
	n := 0
	for _, p := range cpus {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "dropped events: "); ok {
				d, _ := strconv.Atoi(strings.TrimSpace(v))
				n += d
			}
		}
	}
	return n
}

// Close stops recording and removes the instance, which frees its
// buffers; Stop does so too.
func (r *Recording) Close() {
	os.WriteFile(filepath.Join(r.dir, "tracing_on"), []byte("0\n"), 0)
	os.Remove(r.dir)
}
