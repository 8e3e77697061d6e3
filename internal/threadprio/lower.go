package threadprio

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Background is the nice value of lowered work.
const Background = 19

// Lower locks the calling goroutine to its thread and lowers the thread to
// Background. restore gives the thread back its priority and unlocks it;
// when the priority cannot be given back (raising it takes CAP_SYS_NICE)
// the goroutine stays locked to the lowered thread, which then ends with
// it, rather than lowering whatever runs on the thread next. Where the
// thread cannot be lowered, Lower changes nothing.
func Lower() (restore func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		runtime.UnlockOSThread()
		return func() {}
	}
	was := 20 - raw // the raw system call gives 20 - nice
	if was >= Background || unix.Setpriority(unix.PRIO_PROCESS, tid, Background) != nil {
		runtime.UnlockOSThread()
		return func() {}
	}
	return func() {
		if unix.Setpriority(unix.PRIO_PROCESS, tid, was) == nil {
			runtime.UnlockOSThread()
		}
	}
}
