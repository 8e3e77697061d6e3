package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
)

// TraceEnv names a file the daemon writes a Go execution trace of its whole
// run to (`go tool trace`), with CPU profile samples, when set: a debug
// option, for benchmarks. Each connection's goroutine logs its peer's uid
// (category "conn") and each unary call is a region named after its
// method, so that one user's requests can be told from another's.
const TraceEnv = "GPUSCHED_TRACE"

// startTrace starts the trace TraceEnv asks for; stop ends and closes it.
func startTrace() (stop func(), err error) {
	path := os.Getenv(TraceEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TraceEnv, err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", TraceEnv, err)
	}
	// With the CPU profiler on, the trace carries its samples, each with
	// its goroutine; the profile itself is not kept.
	profiling := pprof.StartCPUProfile(io.Discard) == nil
	return func() {
		if profiling {
			pprof.StopCPUProfile()
		}
		trace.Stop()
		f.Close()
	}, nil
}

// traceConn marks the calling goroutine as serving uid's connection.
func traceConn(ctx context.Context, uid uint32) {
	if trace.IsEnabled() {
		trace.Log(ctx, "conn", strconv.FormatUint(uint64(uid), 10))
	}
}

// traceCall starts the region of one call; end ends it.
func traceCall(ctx context.Context, method string) (end func()) {
	if !trace.IsEnabled() {
		return func() {}
	}
	return trace.StartRegion(ctx, method).End
}
