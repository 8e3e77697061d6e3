package rtprio

import (
	"fmt"
	"os"
	"os/signal"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cpuTimer is a POSIX timer on this process's CPU clock
// (timer_create(2), CLOCK_PROCESS_CPUTIME_ID): it sends the process
// SIGXCPU once its threads together have used the CPU time it was set to,
// so the budget is checked when the daemon works, not at every tick of a
// clock while it sleeps. A SIGXCPU from anything else (RLIMIT_CPU) only
// brings a check forward.
type cpuTimer struct {
	id    int32 // the kernel's timer_t
	fired chan os.Signal
}

// sigevent is the kernel's struct sigevent on 64-bit Linux
// (include/uapi/asm-generic/siginfo.h): 64 bytes, of which SIGEV_SIGNAL
// reads the signal number.
type sigevent struct {
	value  uint64
	signo  int32
	notify int32
	_      [48]byte
}

const sigevSignal = 0 // SIGEV_SIGNAL: a process-directed signal

func newCPUTimer() (*cpuTimer, error) {
	t := &cpuTimer{fired: make(chan os.Signal, 1)}
	signal.Notify(t.fired, unix.SIGXCPU)
	ev := sigevent{signo: int32(unix.SIGXCPU), notify: sigevSignal}
	if _, _, e := unix.Syscall(unix.SYS_TIMER_CREATE, unix.CLOCK_PROCESS_CPUTIME_ID, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&t.id))); e != 0 {
		signal.Stop(t.fired)
		return nil, fmt.Errorf("timer_create(CLOCK_PROCESS_CPUTIME_ID): %w", e)
	}
	return t, nil
}

// set makes the timer fire once the process has used d more CPU time from
// now (d > 0); set(0) disarms it.
func (t *cpuTimer) set(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if _, _, e := unix.Syscall6(unix.SYS_TIMER_SETTIME, uintptr(t.id), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		return fmt.Errorf("timer_settime: %w", e)
	}
	return nil
}

// close deletes the timer before the signal is let go, so that none is
// sent after.
func (t *cpuTimer) close() {
	unix.Syscall(unix.SYS_TIMER_DELETE, uintptr(t.id), 0, 0)
	signal.Stop(t.fired)
}

// cpuUsed is the CPU time this process's threads have used, on the clock
// the timer counts.
func cpuUsed() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
