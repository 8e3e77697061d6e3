package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"
)

// config is the job's behaviour, from its flags.
type config struct {
	vramMiB  uint64        // per visible GPU
	ramp     time.Duration // time to grow to vramMiB; 0: at once
	hold     time.Duration // time to run once grown; 0: until killed
	exitCode int
	oomOnce  string // marker file: fail with OOM once, when it is absent
	hostMiB  uint64 // host memory filled with a verifiable pattern
	tick     time.Duration
	ticks    int    // exit after this many ticks: work done, time stopped not counted
	cycles   int    // times to free everything and ramp again after a hold
	gpuCheck bool   // speak scripts/gpu-check's workload protocol
	nccl     string // NCCL group to join; "": none
	ncclShm  bool   // with nccl: map an NCCL shared-memory segment
	uvm      bool   // map a file named like the UVM device
	util     int    // percent of the time it keeps its GPUs busy
	// --http: a fake OpenAI-compatible model server (http.go)
	httpPort   int           // 0: none
	load       time.Duration // time before it is ready
	model      string        // name it answers with; "": the process name
	tokenDelay time.Duration // time between streamed tokens
	parallel   int           // requests generating at once; 0: no bound
}

// parseFlags parses the command line; usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("gpusched-simjob", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var ramp, hold, tick, load, tokenDelay float64
	fs.Uint64Var(&cfg.vramMiB, "vram", 0, "simulated VRAM to hold on each visible GPU, in `MiB`")
	fs.Float64Var(&ramp, "ramp", 0, "grow to --vram in about 10 steps over this many `seconds` (0: at once)")
	fs.Float64Var(&hold, "hold", 0, "keep running this many `seconds` after reaching --vram (0: until killed)")
	fs.IntVar(&cfg.exitCode, "exit-code", 0, "exit status after --hold")
	fs.StringVar(&cfg.oomOnce, "oom-once", "", "if `MARKERFILE` is absent, create it and fail with a CUDA out-of-memory error")
	fs.Uint64Var(&cfg.hostMiB, "host-mem", 0, "host memory to fill with a pattern checked every second and on SIGUSR1, in `MiB`")
	fs.IntVar(&cfg.cycles, "cycles", 0, "after each --hold, free all VRAM, wait --hold seconds and ramp again, `N` more times")
	fs.BoolVar(&cfg.gpuCheck, "gpu-check", false, "print \"READY <pid> <GiB>\" once --vram is held and answer each SIGUSR1 with a \"VERIFY OK|FAIL ...\" line, as scripts/gpu-check/workload.py does")
	fs.Float64Var(&tick, "tick", 0, "print \"tick N\" every this many `seconds` (0: never)")
	fs.IntVar(&cfg.ticks, "ticks", 0, "with --tick, exit with --exit-code after `N` ticks (work, not wall time: a stopped or CUDA-locked process does not tick)")
	fs.StringVar(&cfg.nccl, "nccl", "", "join simulated NCCL group `GROUP` (needs --vram): load a file named libnccl.so.2 and map an NCCL shared-memory segment")
	fs.BoolVar(&cfg.ncclShm, "nccl-shm", true, "with --nccl, map the /dev/shm/nccl-* segment of NCCL's shared-memory transport")
	fs.BoolVar(&cfg.uvm, "uvm", false, "map a file named nvidia-uvm, as a process with managed (UVM) memory maps /dev/nvidia-uvm")
	fs.IntVar(&cfg.util, "util", 0, "keep its GPUs busy this `percent` of the time while it holds memory, as their utilization shows (0: idle)")
	fs.IntVar(&cfg.httpPort, "http", 0, "serve a fake OpenAI-compatible API (/health, /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings) on 127.0.0.1:`PORT`")
	fs.Float64Var(&load, "load-seconds", 0, "with --http, answer /health 503 for this many `seconds`, as a server loading weights does (--vram then ramps over them)")
	fs.StringVar(&cfg.model, "model", "", "with --http, the model `NAME` its replies carry (default: the process name)")
	fs.Float64Var(&tokenDelay, "token-delay", 0, "with --http, wait this many `seconds` between streamed tokens")
	fs.IntVar(&cfg.parallel, "parallel", 0, "with --http, generate for at most `N` requests at once, the others waiting first come, first served, as llama-server's --parallel slots do (0: no bound)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.cycles < 0 {
		return config{}, fmt.Errorf("--cycles %d: must not be negative", cfg.cycles)
	}
	if cfg.util < 0 || cfg.util > 100 {
		return config{}, fmt.Errorf("--util %d: must be 0 to 100", cfg.util)
	}
	if cfg.util > 0 && cfg.vramMiB == 0 {
		return config{}, errors.New("--util needs --vram: a GPU is busy only for a process that holds memory on it")
	}
	if cfg.nccl != "" && cfg.vramMiB == 0 {
		return config{}, errors.New("--nccl needs --vram: an NCCL member holds GPU memory")
	}
	if cfg.ticks < 0 {
		return config{}, fmt.Errorf("--ticks %d: must not be negative", cfg.ticks)
	}
	if cfg.exitCode < 0 || cfg.exitCode > 255 {
		return config{}, fmt.Errorf("--exit-code %d: must be 0 to 255", cfg.exitCode)
	}
	if cfg.httpPort < 0 || cfg.httpPort > 65535 {
		return config{}, fmt.Errorf("--http %d: must be a TCP port, 1 to 65535", cfg.httpPort)
	}
	if cfg.httpPort == 0 && (load != 0 || cfg.model != "" || tokenDelay != 0 || cfg.parallel != 0) {
		return config{}, errors.New("--load-seconds, --model, --token-delay and --parallel need --http")
	}
	if cfg.parallel < 0 {
		return config{}, fmt.Errorf("--parallel %d: must not be negative", cfg.parallel)
	}
	var err error
	for _, d := range []struct {
		name string
		secs float64
		dst  *time.Duration
	}{{"ramp", ramp, &cfg.ramp}, {"hold", hold, &cfg.hold}, {"tick", tick, &cfg.tick},
		{"load-seconds", load, &cfg.load}, {"token-delay", tokenDelay, &cfg.tokenDelay}} {
		if *d.dst, err = seconds(d.name, d.secs); err != nil {
			return config{}, err
		}
	}
	if cfg.ticks > 0 && cfg.tick == 0 {
		return config{}, errors.New("--ticks needs --tick")
	}
	if cfg.ramp == 0 {
		cfg.ramp = cfg.load // a loading server's memory grows as its weights load
	}
	return cfg, nil
}

// seconds converts a non-negative number of seconds to a duration.
func seconds(name string, s float64) (time.Duration, error) {
	if math.IsNaN(s) || s < 0 || s > 1e9 {
		return 0, errors.New("--" + name + ": must be 0 or a positive number of seconds")
	}
	return time.Duration(s * float64(time.Second)), nil
}
