package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// rampSteps is how many allocations a --ramp takes.
const rampSteps = 10

// lockedRetry is how often an allocation is retried while the process is
// locked for a checkpoint, as a CUDA call blocks until the unlock.
const lockedRetry = 5 * time.Millisecond

// job is one run of the simulated job.
type job struct {
	cfg    config
	out    io.Writer
	errOut io.Writer
	pid    int      // host pid
	vram   *vram    // nil without --vram
	mem    *hostMem // nil without --host-mem
	http   *server  // nil without --http
}

// run executes the job and returns its exit status. SIGTERM and SIGINT end
// it by that same signal, after releasing its simulated memory.
func run(cfg config, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGUSR1)
	j := &job{cfg: cfg, out: stdout, errOut: stderr}
	if err := j.setup(); err != nil {
		j.errorf("%v", err)
		return 2
	}
	gpus := os.Getenv(envVisible)
	if gpus == "" {
		gpus = "none"
	}
	if j.vram != nil {
		gpus = j.vram.uuids()
	}
	j.printf("simjob: pid=%d gpus=%s vram=%d", j.pid, gpus, cfg.vramMiB)
	if err := j.mapKinds(); err != nil {
		j.errorf("%v", err)
		j.release()
		return 2
	}
	if err := j.applyMPS(); err != nil {
		j.errorf("%v", err)
		j.release()
		return 2
	}
	if cfg.oomOnce != "" {
		if code, failed := j.oomOnce(); failed {
			return code
		}
	}
	if cfg.httpPort > 0 {
		if err := j.startHTTP(); err != nil {
			j.errorf("%v", err)
			j.release()
			return 2
		}
	}
	if cfg.hostMiB > 0 {
		j.mem = newHostMem(cfg.hostMiB, uint64(time.Now().UnixNano())^uint64(j.pid))
		j.printf("simjob: host memory %d MiB filled", cfg.hostMiB)
	}
	return j.loop(sigs)
}

// setup finds the job's host pid and, with --vram, its GPUs.
func (j *job) setup() error {
	pid, err := procfs.SelfPID()
	if err != nil {
		return err
	}
	j.pid = pid
	if j.cfg.vramMiB == 0 {
		return nil
	}
	if err := simgpu.InitCUDA(); err != nil {
		return err
	}
	start, err := procfs.StartTime(pid)
	if err != nil {
		return err
	}
	if j.vram, err = openVRAM(pid, start); err != nil {
		return err
	}
	j.vram.util = j.cfg.util
	return nil
}

// startHTTP binds --http's port and serves the fake model server on it;
// it reports ready once the job has grown to --vram and --load-seconds
// have passed.
func (j *job) startHTTP() error {
	ln, err := listen(j.cfg.httpPort)
	if err != nil {
		return err
	}
	s := &server{
		model:   j.cfg.model,
		readyAt: time.Now().Add(j.cfg.load),
		crash:   crashNow(j.printf),
		logf:    j.printf,
		apiKey:  os.Getenv(apiKeyEnv),
	}
	if n := j.cfg.parallel; n > 0 {
		s.slots = newSlots(n)
	}
	if d := j.cfg.tokenDelay; d > 0 {
		s.pace = func() { time.Sleep(d) } // the model's time per token
	}
	if s.model == "" {
		s.model = filepath.Base(os.Args[0])
	}
	if j.vram != nil {
		reg := j.vram.reg
		s.gpuBusy = func() bool {
			pid, err := procfs.SelfPID() // the host pid changes on a CRIU restore
			if err != nil {
				return false
			}
			state, err := reg.CheckpointState(pid)
			return err == nil && (state == simgpu.StateLocked || state == simgpu.StateCheckpointed)
		}
	}
	j.http = s
	j.printf("simjob: serving model %s on http://%s", s.model, ln.Addr())
	go s.serve(ln)
	return nil
}

// oomOnce fails like a CUDA OOM the first time (creating the marker file),
// and reports failed=false once the marker exists.
func (j *job) oomOnce() (code int, failed bool) {
	f, err := os.OpenFile(j.cfg.oomOnce, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return 0, false
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		j.errorf("--oom-once: %v", err)
		return 2, true
	}
	fmt.Fprintf(j.errOut, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %d MiB. (simulated by gpusched-simjob --oom-once)\n", j.cfg.vramMiB)
	return 1, true
}

// loop grows the allocation, holds it, ticks and verifies host memory until
// the hold ends or a signal arrives.
func (j *job) loop(sigs <-chan os.Signal) int {
	var stepC, holdC, tickC, verifyC <-chan time.Time
	steps, step := 0, 1
	if j.vram != nil {
		steps = 1
		if j.cfg.ramp > 0 {
			steps = rampSteps
		}
	}
	begin := time.Now()
	stepAt := func(k int) <-chan time.Time {
		return time.After(time.Until(begin.Add(j.cfg.ramp * time.Duration(k) / time.Duration(steps))))
	}
	if steps > 0 {
		stepC = stepAt(1)
	} else {
		holdC = j.reached()
	}
	if j.cfg.tick > 0 {
		t := time.NewTicker(j.cfg.tick)
		defer t.Stop()
		tickC = t.C
	}
	if j.mem != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		verifyC = t.C
	}
	ticks, cycle := 0, 0
	for {
		select {
		case sig := <-sigs:
			if sig != unix.SIGUSR1 {
				j.printf("simjob: %s with CUDA %s", unix.SignalName(sig.(unix.Signal)), j.cudaState())
				j.release()
				dieFrom(sig.(unix.Signal))
			}
			if j.cfg.gpuCheck {
				j.printf("%s", j.verifyLine())
				continue
			}
			if j.mem != nil {
				if err := j.mem.verify(); err != nil {
					return j.exit(3, err)
				}
				j.printf("simjob: host memory verified")
			}
		case <-verifyC:
			if err := j.mem.verify(); err != nil {
				return j.exit(3, err)
			}
		case <-tickC:
			// Counted work is GPU work: none is done while the
			// process's CUDA calls are blocked for a checkpoint (a
			// thaw continues the process before it unlocks it).
			if j.cfg.ticks > 0 && j.vram != nil && j.cudaState() != simgpu.StateRunning {
				continue
			}
			ticks++
			j.printf("tick %d", ticks)
			if ticks == j.cfg.ticks {
				j.release()
				j.printf("simjob: %d ticks done, exiting with %d", ticks, j.cfg.exitCode)
				return j.cfg.exitCode
			}
		case <-stepC:
			target := j.cfg.vramMiB * uint64(step) / uint64(steps)
			err := j.vram.grow(target)
			if errors.Is(err, simgpu.ErrLocked) {
				stepC = time.After(lockedRetry)
				continue
			}
			if err != nil {
				code := 2
				if errors.Is(err, simgpu.ErrOutOfMemory) {
					code = 1
				}
				return j.exit(code, err)
			}
			if step++; step <= steps {
				stepC = stepAt(step)
			} else {
				stepC, holdC = nil, j.reached()
			}
		case <-holdC:
			j.release()
			if cycle < j.cfg.cycles && steps > 0 {
				cycle++
				j.vram.got, j.vram.held = make([]uint64, len(j.vram.devs)), 0
				j.printf("simjob: freed all VRAM, cycle %d of %d", cycle, j.cfg.cycles)
				begin, step, holdC = time.Now().Add(j.cfg.hold), 1, nil
				stepC = stepAt(1)
				continue
			}
			j.printf("simjob: done, exiting with %d", j.cfg.exitCode)
			return j.cfg.exitCode
		}
	}
}

// reached reports the full allocation and starts the hold; a nil channel
// holds until killed.
func (j *job) reached() <-chan time.Time {
	if j.vram != nil {
		for _, d := range j.vram.devs {
			j.printf("simjob: allocated %d MiB on %s", j.vram.held, d.UUID)
		}
	}
	if j.cfg.gpuCheck {
		j.ready()
	}
	if j.http != nil {
		j.http.loaded.Store(true)
	}
	if j.cfg.hold == 0 {
		return nil
	}
	return time.After(j.cfg.hold)
}

// exit reports err, releases the job's memory and returns code.
func (j *job) exit(code int, err error) int {
	if errors.Is(err, simgpu.ErrOutOfMemory) {
		fmt.Fprintln(j.errOut, err) // the PyTorch line, unprefixed
	} else {
		j.errorf("%v", err)
	}
	j.release()
	return code
}

func (j *job) release() {
	if j.vram == nil {
		return
	}
	if err := j.vram.release(); err != nil {
		j.errorf("release simulated VRAM: %v", err)
	}
}

func (j *job) printf(format string, args ...any) {
	fmt.Fprintf(j.out, format+"\n", args...)
}

func (j *job) errorf(format string, args ...any) {
	fmt.Fprintf(j.errOut, "gpusched-simjob: "+format+"\n", args...)
}

// dieFrom ends the process by sig with its default action, so that the
// parent sees a signal death rather than an exit status. A PID namespace's
// init cannot die from its own signal, nor can a process that inherited the
// signal as ignored: they exit as a shell would report the signal.
func dieFrom(sig unix.Signal) {
	if unix.Getpid() != 1 {
		signal.Reset(sig)
		_ = unix.Kill(unix.Getpid(), sig)
		time.Sleep(time.Second) // delivery is asynchronous
	}
	os.Exit(128 + int(sig))
}
