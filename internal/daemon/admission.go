package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// admission decides whether a thaw's GPU memory fits, holding what admitted
// thaws will take until their memory shows in a GPU sample, so that two
// thaws never both count the same free memory.
type admission struct {
	mu       sync.Mutex
	reserved map[string]uint64 // GPU UUID -> MiB held by thaws in progress
	changed  chan struct{}     // closed (and replaced) when memory may have freed
	waiters  int               // thaws waiting for memory
}

func newAdmission() *admission {
	return &admission{reserved: map[string]uint64{}, changed: make(chan struct{})}
}

// notify wakes the thaws waiting for memory: a new GPU sample arrived.
func (a *admission) notify() {
	a.mu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// admit reserves need (MiB per GPU UUID) for a thaw of uid's once every GPU
// has it free beyond the margin, counting what uid's fillers would hand
// over as free; they hand it over before admit returns. With wait 0 it
// answers at once; otherwise it waits up to wait for memory to free. The
// returned func releases the reservation.
func (d *Daemon) admit(ctx context.Context, what string, uid uint32, need map[string]uint64, wait time.Duration) (func(), error) {
	a := d.admission
	var expired <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	for {
		a.mu.Lock()
		short, err := a.shortfall(d.gpuView(), need, d.cfg.ThawMarginMiB, d.yieldTo(uid))
		if err != nil {
			a.mu.Unlock()
			return nil, err
		}
		if short == "" {
			for uuid, mib := range need {
				a.reserved[uuid] += mib
			}
			a.mu.Unlock()
			handedOver := d.handOver(context.WithoutCancel(ctx), uid, need)
			return func() { handedOver(); a.release(need) }, nil
		}
		changed := a.changed
		a.mu.Unlock()
		if wait == 0 {
			return nil, api.Errorf(api.CodeResourceExhausted, "%s: %s (pass a timeout to wait for memory)", what, short)
		}
		if err := a.await(ctx, changed, expired); err != nil {
			if err == errExpired {
				return nil, api.Errorf(api.CodeTimeout, "%s: waited %v for GPU memory: %s", what, wait, short)
			}
			return nil, err
		}
	}
}

var errExpired = errors.New("admission wait expired")

// await blocks until changed is closed, the wait expires or ctx ends,
// counting itself among the waiters meanwhile.
func (a *admission) await(ctx context.Context, changed <-chan struct{}, expired <-chan time.Time) error {
	a.mu.Lock()
	a.waiters++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.waiters--
		a.mu.Unlock()
	}()
	select {
	case <-changed:
		return nil
	case <-expired:
		return errExpired
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waiting is the number of thaws waiting for memory.
func (a *admission) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiters
}

func (a *admission) release(need map[string]uint64) {
	a.mu.Lock()
	for uuid, mib := range need {
		a.reserved[uuid] -= mib
		if a.reserved[uuid] == 0 {
			delete(a.reserved, uuid)
		}
	}
	a.mu.Unlock()
}

// fits reports whether need fits now, without reserving it.
func (a *admission) fits(gv *gpuView, need map[string]uint64, margin uint64, yield func(uuid string) uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	short, err := a.shortfall(gv, need, margin, yield)
	return err == nil && short == ""
}

// yieldTo says how much memory uid's filler on a GPU would hand over.
func (d *Daemon) yieldTo(uid uint32) func(uuid string) uint64 {
	return func(uuid string) uint64 { return d.fillerYield(uuid, uid) }
}

// shortfall describes the GPUs (by index) that lack room for need, or ""
// when all have it; yield is memory a GPU's filler would hand over. A GPU
// missing from the sample is an error.
func (a *admission) shortfall(gv *gpuView, need map[string]uint64, margin uint64, yield func(uuid string) uint64) (string, error) {
	uuids := make([]string, 0, len(need))
	for uuid := range need {
		uuids = append(uuids, uuid)
	}
	sort.Strings(uuids)
	var shorts []string
	for _, uuid := range uuids {
		dev, ok := gv.device(uuid)
		if !ok {
			return "", api.Errorf(api.CodeUnavailable, "GPU %s is not present", uuid)
		}
		avail := free(dev.TotalMiB, dev.UsedMiB+a.reserved[uuid]) + yield(uuid)
		if need[uuid]+margin > avail {
			shorts = append(shorts, fmt.Sprintf("GPU %d needs %d MiB plus a %d MiB margin, %d MiB free", dev.Index, need[uuid], margin, avail))
		}
	}
	return strings.Join(shorts, "; "), nil
}

// held is what admitted thaws hold per GPU UUID until they finish.
func (a *admission) held() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.reserved)
}
