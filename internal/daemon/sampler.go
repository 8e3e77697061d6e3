package daemon

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// gpuView is one immutable GPU sample with its usage attributed to managed
// processes.
type gpuView struct {
	at      time.Time
	devices []gpu.Device
	procs   []gpu.ProcUsage
	driver  string                       // the GPU driver's version
	index   map[string]int               // uuid -> device index
	usage   map[string]map[string]uint64 // record id -> uuid -> MiB, over its whole tree
	owner   map[int]string               // GPU pid -> record id
}

// device finds a GPU of the sample by UUID.
func (v *gpuView) device(uuid string) (gpu.Device, bool) {
	for _, dv := range v.devices {
		if dv.UUID == uuid {
			return dv, true
		}
	}
	return gpu.Device{}, false
}

// sampler polls the GPU backend and on demand (kick), keeping the latest
// attributed sample readable without locks.
type sampler struct {
	backend  gpuBackend
	interval time.Duration
	table    *proctable.Table
	log      *zap.Logger
	view     atomic.Pointer[gpuView]
	kicks    chan struct{}
	onSample func()       // called after every new sample
	lastTry  atomic.Int64 // unix nanoseconds when run last finished a round, failed or not
}

func newSampler(b gpuBackend, interval time.Duration, t *proctable.Table, log *zap.Logger) *sampler {
	s := &sampler{backend: b, interval: interval, table: t, log: log, kicks: make(chan struct{}, 1)}
	s.view.Store(&gpuView{index: map[string]int{}})
	return s
}

func (s *sampler) current() *gpuView { return s.view.Load() }

// kick asks for a sample now (a process exited, memory moved).
func (s *sampler) kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kicks:
		}
		if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("GPU sample failed", zap.Error(err))
		}
		s.lastTry.Store(time.Now().UnixNano())
	}
}

// idleFor is how long since run last finished a round (since start when it
// has not yet): a GPU call that hangs shows here.
func (s *sampler) idleFor(now time.Time, started time.Time) time.Duration {
	last := started
	if n := s.lastTry.Load(); n != 0 {
		last = time.Unix(0, n)
	}
	return now.Sub(last)
}

// refresh takes one sample and attributes each GPU process to the managed
// tree it belongs to, by walking up its parents to a managed init.
func (s *sampler) refresh(ctx context.Context) error {
	smp, err := s.backend.Sample(ctx)
	if err != nil {
		return err
	}
	v := &gpuView{at: time.Now(), devices: smp.Devices, procs: smp.Procs, driver: smp.Driver,
		index: map[string]int{}, usage: map[string]map[string]uint64{}, owner: map[int]string{}}
	sort.Slice(v.devices, func(i, j int) bool { return v.devices[i].Index < v.devices[j].Index })
	for _, dv := range v.devices {
		v.index[dv.UUID] = dv.Index
	}
	inits := map[int]string{}
	for _, r := range s.table.View().Records {
		if r.Live() && r.InitPID > 0 {
			inits[r.InitPID] = r.ID
		}
	}
	for _, p := range smp.Procs {
		id, ok := rootOf(p.PID, inits)
		if !ok {
			continue
		}
		v.owner[p.PID] = id
		if v.usage[id] == nil {
			v.usage[id] = map[string]uint64{}
		}
		v.usage[id][p.UUID] += p.UsedMiB
	}
	s.view.Store(v)
	if s.onSample != nil {
		s.onSample()
	}
	return nil
}

// rootOf walks from pid up its parents to a managed init.
func rootOf(pid int, inits map[int]string) (string, bool) {
	for depth := 0; pid > 1 && depth < 256; depth++ {
		if id, ok := inits[pid]; ok {
			return id, true
		}
		st, err := procfs.ReadStat(pid)
		if err != nil {
			return "", false
		}
		pid = st.PPID
	}
	return "", false
}
