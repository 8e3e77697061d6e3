package memfill

import (
	"errors"
	"io"
	"log"
	"sync"
	"testing"
	"time"
)

// fakeBackend is a device of total MiB on which others use other MiB.
type fakeBackend struct {
	mu       sync.Mutex
	total    uint64
	other    uint64
	chunk    uint64
	live     map[handle]bool
	next     handle
	failures int         // the next Allocs that fail
	onAlloc  func(n int) // called after the n-th successful Alloc
	allocs   int
}

func newFake(total, chunk uint64) *fakeBackend {
	return &fakeBackend{total: total, chunk: chunk, live: map[handle]bool{}}
}

func (b *fakeBackend) used() uint64 { return b.other + uint64(len(b.live))*b.chunk }

func (b *fakeBackend) Alloc() (handle, error) {
	b.mu.Lock()
	if b.failures > 0 || b.used()+b.chunk > b.total {
		b.failures = max(b.failures-1, 0)
		b.mu.Unlock()
		return 0, errors.New("out of memory")
	}
	b.next++
	b.live[b.next] = true
	b.allocs++
	n, hook := b.allocs, b.onAlloc
	b.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return b.next, nil
}

func (b *fakeBackend) FreeChunk(h handle) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.live[h] {
		return errors.New("not allocated")
	}
	delete(b.live, h)
	return nil
}

func (b *fakeBackend) Free() (uint64, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - min(b.used(), b.total), b.total, nil
}

func (b *fakeBackend) Close() {}

func (b *fakeBackend) setOther(mib uint64) {
	b.mu.Lock()
	b.other = mib
	b.mu.Unlock()
}

func (b *fakeBackend) free() uint64 {
	f, _, _ := b.Free()
	return f
}

var discard = log.New(io.Discard, "", 0)

func TestHolderSet(t *testing.T) {
	be := newFake(24576, 256)
	h := newHolder(be, 256, discard)
	st := h.set(params{targetMiB: 23347})
	if st.HeldMiB != 91*256 || st.FreeMiB != 24576-91*256 || st.TotalMiB != 24576 || st.Error != "" {
		t.Fatalf("after set target 23347: %+v", st)
	}
	// A raised reserve is free when set returns.
	st = h.set(params{targetMiB: 23347, reserveMiB: 8192})
	if want := uint64(1229 + 8192); st.FreeMiB < want || be.free() < want || be.free() >= want+256 {
		t.Fatalf("after reserve 8192: %+v, device free %d, want [%d, %d)", st, be.free(), want, want+256)
	}
	if st.TargetMiB != 23347 || st.ReserveMiB != 8192 {
		t.Fatalf("state does not echo the params: %+v", st)
	}
	st = h.set(params{targetMiB: 23347})
	if st.HeldMiB != 91*256 {
		t.Fatalf("after reserve 0: %+v", st)
	}
	// Someone else takes everything the filler does not hold: the reserve
	// empties the filler and the state says so.
	be.setOther(24576 - 91*256)
	st = h.set(params{targetMiB: 23347, reserveMiB: 1 << 20})
	if st.HeldMiB != 0 || st.FreeMiB != 91*256 {
		t.Fatalf("reserve beyond the device: %+v", st)
	}
}

func TestHolderGrowStopsAtFailureAndRetries(t *testing.T) {
	be := newFake(4096, 256)
	be.failures = 1
	h := newHolder(be, 256, discard)
	st := h.set(params{targetMiB: 4096})
	if st.HeldMiB != 0 || st.Error == "" {
		t.Fatalf("first allocation failed: %+v", st)
	}
	h.mu.Lock()
	h.pass()
	st = h.state()
	h.mu.Unlock()
	if st.HeldMiB != 4096 || st.Error != "" {
		t.Fatalf("next pass: %+v", st)
	}
}

func TestHolderGrowYieldsToNewParams(t *testing.T) {
	be := newFake(24576, 256)
	h := newHolder(be, 256, discard)
	be.onAlloc = func(n int) {
		if n == 5 {
			h.gen.Add(1) // what set does before it waits for the pass
		}
	}
	st := h.set(params{targetMiB: 24576})
	if st.HeldMiB != 5*256 {
		t.Fatalf("grow went on after the params changed: %+v", st)
	}
}

func TestHolderReleaseAll(t *testing.T) {
	be := newFake(8192, 256)
	h := newHolder(be, 256, discard)
	h.set(params{targetMiB: 8192})
	st := h.releaseAll()
	if st.HeldMiB != 0 || len(be.live) != 0 || st.FreeMiB != 8192 {
		t.Fatalf("after releaseAll: %+v, %d chunks live", st, len(be.live))
	}
	if st := h.set(params{targetMiB: 8192}); st.HeldMiB != 0 {
		t.Fatalf("holds again after releaseAll: %+v", st)
	}
}

func TestHolderRunNotifiesChanges(t *testing.T) {
	be := newFake(8192, 256)
	h := newHolder(be, 256, discard)
	if st := h.set(params{targetMiB: 7000}); st.HeldMiB != 27*256 {
		t.Fatalf("set: %+v", st)
	}
	states := make(chan State, 100)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.run(time.Millisecond, stop, func(st State) { states <- st }) })
	defer func() { close(stop); wg.Wait() }()
	be.setOther(1000)
	st := <-states
	if st.HeldMiB != 23*256 || st.FreeMiB != 8192-1000-23*256 {
		t.Fatalf("after another process took 1000 MiB: %+v", st)
	}
	be.setOther(0)
	if st2 := <-states; st2.HeldMiB != 27*256 || st2.Seq <= st.Seq {
		t.Fatalf("after it freed them: %+v", st2)
	}
}
