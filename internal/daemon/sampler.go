package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// gpuView is one immutable GPU sample with its usage attributed to managed
// processes.
type gpuView struct {
	seq     uint64 // the sample's number, in the order samples began (0: none)
	at      time.Time
	devices []gpu.Device
	procs   []gpu.ProcUsage
	driver  string                       // the GPU driver's version
	index   map[string]int               // uuid -> device index
	usage   map[string]map[string]uint64 // record id -> uuid -> MiB, over its whole tree
	// util is, by record id and uuid, its tree's processes' own
	// utilization summed (at most 100), or -1 where one of them has no
	// figure (the backend cannot tell processes apart).
	util  map[string]map[string]int
	owner map[int]string // GPU pid -> record id
	// stale is why this view is not fresh: the error of the last sample,
	// which failed as a whole (the view is then the last good sample's);
	// "" when the last sample succeeded. staleSince is when sampling
	// began to fail.
	stale      string
	staleSince time.Time
	// lost says, by UUID, why a device's data is missing: it dropped out
	// of the device list (fell off the bus) or its queries fail. Such a
	// device stays in devices with its last known memory, so that it is
	// reported and never silently dropped, but nothing is placed on it.
	lost map[string]string
}

// problem is why dv's data cannot be trusted now, or "".
func (v *gpuView) problem(dv gpu.Device) string {
	if why := v.lost[dv.UUID]; why != "" {
		return why
	}
	if v.stale != "" {
		return fmt.Sprintf("GPU %d: data is stale: GPU sampling fails since %s: %s", dv.Index, v.staleSince.Format(time.RFC3339), v.stale)
	}
	return ""
}

// lostError refuses an operation (what) aimed at GPUs (UUIDs) of which
// one is lost; nil when none is.
func (v *gpuView) lostError(what string, uuids []string) error {
	for _, uuid := range uuids {
		if why := v.lost[uuid]; why != "" {
			return api.Errorf(api.CodeUnavailable, "%s: %s", what, why)
		}
	}
	return nil
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
	// begun numbers the samples as they begin; publishMu orders their
	// views, so that a sample that began before another but ended after
	// it never replaces it (refresh runs from the loop and from callers at
	// once).
	begun     atomic.Uint64
	publishMu sync.Mutex

	// knownPath keeps the devices seen (gpus.json in the state directory),
	// so that a GPU lost while the daemon was down is still reported
	// missing; saved is what it holds.
	knownPath string
	saveMu    sync.Mutex
	saved     string
}

// knownDevice is a device as gpus.json in the state directory keeps it.
type knownDevice struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	Name     string `json:"name"`
	TotalMiB uint64 `json:"total_mib"`
}

// loadKnown starts the view with the devices seen by an earlier daemon
// (none if it kept none), before the first sample: a device the first
// sample lacks is then reported missing rather than forgotten.
func (s *sampler) loadKnown(path string) error {
	s.knownPath = path
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("known GPUs: %w", err)
	}
	var known []knownDevice
	if err := json.Unmarshal(data, &known); err != nil {
		s.log.Warn("ignoring a bad list of known GPUs", zap.String("path", path), zap.Error(err))
		return nil
	}
	s.saved = string(data)
	v := &gpuView{index: map[string]int{}}
	for _, k := range known {
		v.devices = append(v.devices, gpu.Device{Index: k.Index, UUID: k.UUID, Name: k.Name, TotalMiB: k.TotalMiB})
		v.index[k.UUID] = k.Index
	}
	s.view.Store(v)
	return nil
}

// saveKnown records the devices of v when they differ from what is saved.
// A failure to save is logged: it only weakens the report after a restart.
func (s *sampler) saveKnown(v *gpuView) {
	if s.knownPath == "" {
		return
	}
	known := make([]knownDevice, 0, len(v.devices))
	for _, dv := range v.devices {
		known = append(known, knownDevice{Index: dv.Index, UUID: dv.UUID, Name: dv.Name, TotalMiB: dv.TotalMiB})
	}
	data, err := json.Marshal(known)
	if err != nil {
		return
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if string(data) == s.saved {
		return
	}
	if err := store.WriteFile(s.knownPath, data, 0o600); err != nil {
		s.log.Warn("save the list of known GPUs", zap.String("path", s.knownPath), zap.Error(err))
		return
	}
	s.saved = string(data)
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
//
// A failed sample keeps the last view, marked stale with the error (and
// still tells onSample, so that placement stops using it). A device of the
// last view that the new sample lacks, or lists with an error, stays in the
// view, marked lost, with its last known memory.
func (s *sampler) refresh(ctx context.Context) error {
	seq := s.begun.Add(1)
	smp, err := s.backend.Sample(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	logUntrusted(s.log, smp.Untrusted)
	if s.publish(seq, smp, err) && s.onSample != nil {
		s.onSample()
	}
	return err
}

// publish makes sample seq (or its error) the view, unless a sample that
// began after it is out already; it reports whether it did.
func (s *sampler) publish(seq uint64, smp gpu.Sample, err error) bool {
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	prev := s.view.Load()
	if prev.seq > seq {
		return false
	}
	if err != nil {
		v := *prev
		v.seq, v.stale, v.staleSince = seq, err.Error(), time.Now()
		if prev.stale != "" {
			v.staleSince = prev.staleSince
		}
		s.view.Store(&v)
		return true
	}
	v := &gpuView{seq: seq, at: time.Now(), procs: smp.Procs, driver: smp.Driver,
		index: map[string]int{}, usage: map[string]map[string]uint64{}, util: map[string]map[string]int{}, owner: map[int]string{}}
	v.devices, v.lost = mergeLost(prev, smp.Devices)
	sort.Slice(v.devices, func(i, j int) bool { return v.devices[i].Index < v.devices[j].Index })
	s.saveKnown(v)
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
		v.attribute(id, p)
	}
	s.view.Store(v)
	return true
}

// attribute counts GPU process p as record id's: its memory and its
// utilization in id's tree's.
func (v *gpuView) attribute(id string, p gpu.ProcUsage) {
	v.owner[p.PID] = id
	if v.usage[id] == nil {
		v.usage[id], v.util[id] = map[string]uint64{}, map[string]int{}
	}
	v.usage[id][p.UUID] += p.UsedMiB
	switch u, seen := v.util[id][p.UUID]; {
	case p.UtilPercent == nil || seen && u < 0:
		v.util[id][p.UUID] = -1
	default:
		v.util[id][p.UUID] = min(u+*p.UtilPercent, 100)
	}
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

// mergeLost adds to a new sample's devices those of the previous view it
// lacks, and marks them and the devices it lists with an error as lost,
// keeping their last known identity and memory.
func mergeLost(prev *gpuView, devs []gpu.Device) ([]gpu.Device, map[string]string) {
	out := make([]gpu.Device, 0, len(devs))
	lost := map[string]string{}
	seen := map[string]bool{}
	for _, dv := range devs {
		seen[dv.UUID] = true
		if dv.Err == "" {
			out = append(out, dv)
			continue
		}
		last, ok := prev.device(dv.UUID)
		if !ok || last.TotalMiB == 0 {
			last = gpu.Device{Index: dv.Index, UUID: dv.UUID, Name: dv.Name, TotalMiB: dv.TotalMiB}
		}
		last.Err = dv.Err
		lost[dv.UUID] = fmt.Sprintf("GPU %d (%s): its queries fail: %s", last.Index, dv.UUID, dv.Err)
		out = append(out, last)
	}
	for _, dv := range prev.devices {
		if seen[dv.UUID] {
			continue
		}
		lost[dv.UUID] = fmt.Sprintf("GPU %d (%s) is missing: the GPU driver no longer lists it (fallen off the bus?)", dv.Index, dv.UUID)
		out = append(out, dv)
	}
	return out, lost
}
