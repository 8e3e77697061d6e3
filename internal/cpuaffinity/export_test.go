package cpuaffinity

// Unconfine forgets Confine, as if this process had never called it; the
// threads keep the CPUs they have. Tests that confine run again with it
// (-count).
func Unconfine() {
	released.Lock()
	released.confined = false
	released.Unlock()
}
