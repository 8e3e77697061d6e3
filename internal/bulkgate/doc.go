// Package bulkgate admits the daemon's bulk work (every line of a log, a
// placement pass over a long queue: CPU-bound work that runs for
// milliseconds) to fewer goroutines at once than the Go runtime has Ps, so
// that a quick request (a status, the next line of a stream) always finds
// a P that no bulk work holds. Bulk work yields between chunks: it gives
// its P to whatever is runnable and its slot to the next waiter, so a
// request waits for one chunk rather than for Go's 10 ms preemption or a
// whole reply. Waiters are admitted one user at a time in turn: a user with
// many requests waiting goes behind one with few.
package bulkgate
