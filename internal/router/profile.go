package router

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// ProfileEnv names a file the router writes a CPU profile of its whole run
// to (`go tool pprof`), when set: a debug option, for benchmarks.
const ProfileEnv = "GPUSCHED_ROUTER_CPUPROFILE"

// startProfile starts the CPU profile ProfileEnv asks for; stop writes it.
func startProfile() (stop func(), err error) {
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", ProfileEnv, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
