package daemon

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// lease is one GPU lease: pending until placement grants it, then held
// until released or until the connection that acquired it closes.
type lease struct {
	id       string
	uid      uint32
	user     string
	peerPID  int // the acquiring process: its tree's GPU memory is the lease's own
	mib      uint64
	count    int
	only     []string
	maxUtil  int
	maxPower float64
	maxTemp  int
	priority int
	seq      uint64
	queuedAt time.Time

	wake    chan struct{} // signalled when granted, refused, or told why it waits
	reason  string        // why it waits, or why it was refused
	refused bool
	uuids   []string // granted GPUs
	at      time.Time
	used    map[string]uint64
	peak    map[string]uint64
	expires time.Time   // when a hold limit releases it; zero: never
	expiry  *time.Timer // releases it then
}

// leaseSet holds every lease, pending and granted.
type leaseSet struct {
	mu      sync.Mutex
	n       uint64
	pending map[string]*lease
	held    map[string]*lease
}

func newLeaseSet() *leaseSet {
	return &leaseSet{pending: map[string]*lease{}, held: map[string]*lease{}}
}

// add queues l, giving it an id and its place in line (after the jobs
// submitted so far), once admit (nil: always) accepts the leases l's user
// holds or waits for already; its error refuses l.
func (s *leaseSet) add(l *lease, lastJobSeq uint64, admit func(mine []*lease) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if admit != nil {
		var mine []*lease
		for _, m := range []map[string]*lease{s.pending, s.held} {
			for _, o := range m {
				if o.uid == l.uid {
					mine = append(mine, o)
				}
			}
		}
		if err := admit(mine); err != nil {
			return err
		}
	}
	s.n++
	l.id = "l" + strconv.FormatUint(s.n, 10)
	l.seq = lastJobSeq<<seqShift | s.n&(1<<seqShift-1)
	l.wake = make(chan struct{}, 1)
	s.pending[l.id] = l
	return nil
}

// requests are the pending leases as placement requests; callers hold
// s.mu.
func (s *leaseSet) requests() []placement.Job {
	out := make([]placement.Job, 0, len(s.pending))
	for _, l := range s.pending {
		out = append(out, placement.Job{ID: leasePrefix + l.id, Owner: l.user, Priority: l.priority, Seq: l.seq,
			QueuedAt: l.queuedAt, GPUs: l.count, VRAMMiB: l.mib, Only: l.only, MaxUtilPercent: l.maxUtil, MaxPowerWatts: l.maxPower,
			MaxTempC: l.maxTemp, PreemptAny: l.uid == 0})
	}
	slices.SortFunc(out, func(a, b placement.Job) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// watchHealth reports whether a pending lease filters GPUs on
// utilization, power or temperature.
func (s *leaseSet) watchHealth() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.pending {
		if l.maxUtil > 0 || l.maxPower > 0 || l.maxTemp > 0 {
			return true
		}
	}
	return false
}

// grant hands a pending lease its GPUs, and returns its user ("" when it
// is no longer pending).
func (s *leaseSet) grant(id string, uuids []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.pending[id]
	if !ok {
		return ""
	}
	delete(s.pending, id)
	l.uuids, l.at, l.reason = uuids, time.Now(), ""
	l.used, l.peak = map[string]uint64{}, map[string]uint64{}
	s.held[id] = l
	notify(l.wake)
	return l.user
}

// refuse ends a pending lease that can never be granted.
func (s *leaseSet) refuse(id, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.pending[id]; ok {
		delete(s.pending, id)
		l.refused, l.reason = true, why
		notify(l.wake)
	}
}

// setReasons records why each pending lease waits, from a pass's waits.
func (s *leaseSet) setReasons(waits []placement.Wait) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	for _, w := range waits {
		id, ok := strings.CutPrefix(w.JobID, leasePrefix)
		if l := s.pending[id]; ok && l != nil {
			l.reason = waitWords(w)
			notify(l.wake)
		}
	}
}

// remove forgets a lease, pending or held, and returns it (nil when gone).
func (s *leaseSet) remove(id string) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.pending[id]
	if l == nil {
		l = s.held[id]
	}
	delete(s.pending, id)
	delete(s.held, id)
	if l != nil && l.expiry != nil {
		l.expiry.Stop()
	}
	return l
}

// expireAfter calls release once held lease id has been held for hold;
// nothing when it is no longer held.
func (s *leaseSet) expireAfter(id string, hold time.Duration, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.held[id]; ok && l.expiry == nil {
		l.expires = l.at.Add(hold)
		l.expiry = time.AfterFunc(time.Until(l.expires), release)
	}
}

// status returns a lease's outcome so far.
func (s *leaseSet) status(l *lease) (granted bool, refused bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, granted = s.held[l.id]
	return granted, l.refused, l.reason
}

// heldLease is a copy of a granted lease for one pass.
type heldLease struct {
	seq        uint64
	id         string
	uuids      []string
	mib        uint64
	priority   int
	used, peak map[string]uint64
	uid        uint32
	user       string
	at         time.Time
	expires    time.Time
}

// granted copies the held leases, in the order they were asked for.
func (s *leaseSet) granted() []heldLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldCopies()
}

// snapshot copies the held leases (as granted does) and the pending ones
// as placement requests (as queue does) at one moment. A pass that copied
// them apart could judge a lease asked for just after another's release
// against held leases copied before that release, and refuse it room the
// released lease no longer took (a no-wait acquire right after a release,
// refused "most headroom: GPU 1 0 MiB" once in CI).
func (s *leaseSet) snapshot() ([]heldLease, []placement.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldCopies(), s.requests()
}

// heldCopies copies the held leases, in the order they were asked for;
// callers hold s.mu.
func (s *leaseSet) heldCopies() []heldLease {
	out := make([]heldLease, 0, len(s.held))
	for _, l := range s.held {
		out = append(out, heldLease{seq: l.seq, id: l.id, uuids: slices.Clone(l.uuids), mib: l.mib, priority: l.priority,
			used: maps.Clone(l.used), peak: maps.Clone(l.peak), uid: l.uid, user: l.user, at: l.at, expires: l.expires})
	}
	slices.SortFunc(out, func(a, b heldLease) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// owners attributes GPU processes to the held leases whose acquiring
// process they descend from.
func (s *leaseSet) owners(pids []int) map[int]string {
	s.mu.Lock()
	peers := map[int]string{}
	for _, l := range s.held {
		if l.peerPID > 0 {
			peers[l.peerPID] = l.id
		}
	}
	s.mu.Unlock()
	out := map[int]string{}
	if len(peers) == 0 {
		return out
	}
	for _, pid := range pids {
		for p, depth := pid, 0; p > 1 && depth < 256; depth++ {
			if id, ok := peers[p]; ok {
				out[pid] = id
				break
			}
			st, err := procfs.ReadStat(p)
			if err != nil {
				break
			}
			p = st.PPID
		}
	}
	return out
}

// observe records a leased process's memory on a GPU.
func (s *leaseSet) observe(id, uuid string, used uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.held[id]; ok {
		l.used[uuid] += used
		l.peak[uuid] = max(l.peak[uuid], l.used[uuid])
	}
}

// resetUsage starts a new observation of the held leases' memory.
func (s *leaseSet) resetUsage() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.held {
		clear(l.used)
	}
}

// notify signals ch without blocking; signals coalesce.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// leaseToAPI renders a granted lease with its GPUs' indices.
func leaseToAPI(h heldLease, gv *gpuView) api.Lease {
	out := api.Lease{ID: h.id, GPUs: make([]api.LeaseGPU, len(h.uuids)), CUDAVisibleDevices: strings.Join(h.uuids, ","),
		MiB: h.mib, User: h.user, UID: h.uid, AcquiredAt: h.at, ExpiresAt: h.expires}
	for i, uuid := range h.uuids {
		idx, ok := gv.index[uuid]
		if !ok {
			idx = -1
		}
		out.GPUs[i] = api.LeaseGPU{Index: idx, UUID: uuid}
	}
	return out
}

// heldCopy is one held lease as heldLease, if it is held.
func (s *leaseSet) heldCopy(id string) (heldLease, bool) {
	for _, h := range s.granted() {
		if h.id == id {
			return h, true
		}
	}
	return heldLease{}, false
}

func leaseWhat(p api.AcquireParams) string {
	what := fmt.Sprintf("acquire %d GPU", max(p.GPUs, 1))
	if p.GPUs > 1 {
		what += "s"
	}
	return what
}
