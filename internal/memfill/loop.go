package memfill

import (
	"log"
	"sync"
	"sync/atomic"
	"time"
)

// handle names one chunk of device memory to its backend.
type handle uint64

// backend holds device memory in chunks of a fixed size. The holder calls
// it from one goroutine at a time.
type backend interface {
	// Alloc allocates one chunk.
	Alloc() (handle, error)
	// FreeChunk frees a chunk that Alloc returned.
	FreeChunk(handle) error
	// Free reports the device's free and total memory, all processes.
	Free() (freeMiB, totalMiB uint64, err error)
	// Close lets the device go, with whatever is still allocated.
	Close()
}

// holder holds chunks of one device so that its free memory stays where
// the policy puts it.
type holder struct {
	be       backend
	chunkMiB uint64
	log      *log.Logger
	gen      atomic.Uint64 // bumped before every change of params: ends a grow pass early

	mu     sync.Mutex // serialises passes and backend calls
	p      params
	chunks []handle
	free   uint64
	total  uint64
	err    string // the last pass's failure
	seq    uint64
	done   bool // released for good: holds nothing from now on
}

func newHolder(be backend, chunkMiB uint64, logger *log.Logger) *holder {
	return &holder{be: be, chunkMiB: chunkMiB, log: logger}
}

// run adjusts the hold every tick until stop closes, and calls notify with
// the new state whenever a pass changed the hold.
func (h *holder) run(tick time.Duration, stop <-chan struct{}, notify func(State)) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		held := len(h.chunks)
		h.pass()
		var st State
		changed := len(h.chunks) != held
		if changed {
			st = h.state()
		}
		h.mu.Unlock()
		if changed {
			notify(st)
		}
	}
}

// set applies new params at once: a pass runs before it returns, so a
// raised reserve is free (or nothing is left to give) when it does.
func (h *holder) set(p params) State {
	h.gen.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.p = p
	h.pass()
	return h.state()
}

// status returns the state with the device's memory read afresh.
func (h *holder) status() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readFree()
	return h.state()
}

// releaseAll frees every chunk and stops the filler from holding any more.
func (h *holder) releaseAll() State {
	h.gen.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	h.setErr(h.release(len(h.chunks)))
	h.readFree()
	return h.state()
}

// pass reads the device's free memory and releases or allocates what the
// policy says. Releasing comes first and runs flat out: it is the
// hand-over latency. Growing stops at the first failure (someone else
// allocating is normal) and when params change meanwhile.
func (h *holder) pass() {
	if h.done {
		return
	}
	gen := h.gen.Load()
	free, total, err := h.be.Free()
	if err != nil {
		h.setErr(err)
		return
	}
	h.free, h.total = free, total
	n := plan(h.p, free, total, len(h.chunks), h.chunkMiB)
	switch {
	case n < 0:
		err = h.release(-n)
	case n > 0:
		err = h.grow(n, gen)
	}
	h.setErr(err)
	if n != 0 {
		h.readFree()
	}
}

// release frees the last n chunks; a chunk that fails to free stays held.
func (h *holder) release(n int) error {
	for range n {
		last := len(h.chunks) - 1
		if err := h.be.FreeChunk(h.chunks[last]); err != nil {
			return err
		}
		h.chunks = h.chunks[:last]
	}
	return nil
}

// grow allocates up to n chunks, one at a time.
func (h *holder) grow(n int, gen uint64) error {
	for range n {
		if h.gen.Load() != gen {
			return nil
		}
		c, err := h.be.Alloc()
		if err != nil {
			return err
		}
		h.chunks = append(h.chunks, c)
	}
	return nil
}

// readFree refreshes the device's free memory.
func (h *holder) readFree() {
	free, total, err := h.be.Free()
	if err != nil {
		h.setErr(err)
		return
	}
	h.free, h.total = free, total
}

// setErr records a pass's failure, logging it when it is new.
func (h *holder) setErr(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != h.err {
		h.log.Printf("%v", err)
	}
	h.err = msg
}

// state returns the current state, numbered.
func (h *holder) state() State {
	h.seq++
	return State{
		HeldMiB:    uint64(len(h.chunks)) * h.chunkMiB,
		FreeMiB:    h.free,
		TotalMiB:   h.total,
		TargetMiB:  h.p.targetMiB,
		ReserveMiB: h.p.reserveMiB,
		Error:      h.err,
		Seq:        h.seq,
	}
}
