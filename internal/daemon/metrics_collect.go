package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// procStates lists every process state, so that gpusched_processes has a
// series for each, zero or not.
var procStates = []api.State{
	api.StateStarting, api.StateRunning, api.StateFreezing, api.StateFrozen, api.StateThawing, api.StateLocked,
	api.StateFailed, api.StateExited, api.StateHibernating, api.StateHibernated, api.StateRestoring,
}

// Label values of gpusched_gpu_memory_reserved_bytes{kind}.
const (
	reservedFiller = "filler" // held by the GPU's memory filler
	reservedLease  = "lease"  // promised to held leases (the whole GPU for an exclusive lease)
	reservedFrozen = "frozen" // of processes frozen off the GPU, parked in host RAM
)

// bytesPerMiB converts the daemon's MiB into the bytes metrics are in.
const bytesPerMiB = 1 << 20

// stateCollector turns the daemon's snapshots (last GPU sample, process
// table view, job queue view, fillers, leases) into gauges at scrape time.
type stateCollector struct {
	d *Daemon

	buildInfo   *prometheus.Desc
	gpuTotal    *prometheus.Desc
	gpuUsed     *prometheus.Desc
	gpuReserved *prometheus.Desc
	gpuUtil     *prometheus.Desc
	gpuPower    *prometheus.Desc
	gpuTemp     *prometheus.Desc
	procVRAM    *prometheus.Desc
	procUtil    *prometheus.Desc
	jobVRAM     *prometheus.Desc
	procs       *prometheus.Desc
	jobs        *prometheus.Desc
	queueDepth  *prometheus.Desc
	leases      *prometheus.Desc
}

func newStateCollector(d *Daemon) *stateCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
	}
	gpu := []string{"gpu", "uuid"}
	return &stateCollector{
		d:           d,
		buildInfo:   desc("build_info", "Always 1: the daemon's version and GPU backend.", "version", "backend"),
		gpuTotal:    desc("gpu_memory_total_bytes", "GPU memory in all, from the last GPU sample.", gpu...),
		gpuUsed:     desc("gpu_memory_used_bytes", "GPU memory in use, from the last GPU sample.", gpu...),
		gpuReserved: desc("gpu_memory_reserved_bytes", "GPU memory set aside, by kind: filler (held by the GPU's filler), lease (declared by held leases; the whole GPU for an exclusive lease), frozen (of processes frozen off this GPU, parked in host RAM, to be thawed back).", "gpu", "uuid", "kind"),
		gpuUtil:     desc("gpu_utilization_ratio", "GPU utilization (0..1) from the last sample, where the backend measures it.", gpu...),
		gpuPower:    desc("gpu_power_watts", "GPU power draw from the last sample, where the backend measures it.", gpu...),
		gpuTemp:     desc("gpu_temperature_celsius", "GPU core temperature from the last sample, where the backend measures it.", gpu...),
		procVRAM:    desc("process_vram_bytes", "GPU memory a live managed process's tree holds, over all its GPUs, from the last GPU sample; job is the queued job it is an attempt of, or empty.", "name", "user", "job"),
		procUtil:    desc("process_gpu_utilization_ratio", "How busy a live managed process's tree kept a GPU it holds memory on (0..1, its processes' own utilization summed), from the last sample, where the backend tells each process's apart.", "name", "user", "job", "gpu", "uuid"),
		jobVRAM:     desc("job_vram_bytes", "GPU memory the current attempt of an active job (starting, running or preempted) holds, over all its GPUs, from the last GPU sample.", "job", "name", "user"),
		procs:       desc("processes", "Managed processes by state (exited ones are kept until removed).", "state"),
		jobs:        desc("jobs", "Jobs by state (finished ones are kept in the queue's history).", "state"),
		queueDepth:  desc("queue_depth", "Jobs waiting in the queue to be placed (state queued)."),
		leases:      desc("leases", "GPU leases by state: pending (waiting for placement) or held.", "state"),
	}
}

// Describe sends every metric's descriptor.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buildInfo, c.gpuTotal, c.gpuUsed, c.gpuReserved, c.gpuUtil, c.gpuPower,
		c.gpuTemp, c.procVRAM, c.procUtil, c.jobVRAM, c.procs, c.jobs, c.queueDepth, c.leases} {
		ch <- d
	}
}

// Collect reads the snapshots as they are now; nothing is cached between
// scrapes.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.buildInfo, 1, Version, d.gpus.Name())
	gv := d.gpuView()
	tv := d.table.View()
	jobs := d.jobs.View()

	c.collectGPUs(gauge, gv, tv)

	byState := make(map[api.State]int, len(procStates))
	for _, s := range procStates {
		byState[s] = 0
	}
	// Memory a sample still shows for a tree frozen since is gone, as
	// placement also counts it.
	vram := make(map[string]uint64, len(tv.Records)) // record id -> MiB on its GPUs
	for _, r := range tv.Records {
		byState[r.State]++
		if !r.Live() {
			continue
		}
		if onGPU(r.State) {
			vram[r.ID] = sumMiB(gv.usage[r.ID])
			for uuid := range gv.usage[r.ID] {
				idx, listed := gv.index[uuid]
				if u, ok := gv.ownUtil(r.ID, uuid); ok && listed {
					gauge(c.procUtil, float64(u)/100, r.Name, r.Owner.User, r.Job, strconv.Itoa(idx), uuid)
				}
			}
		}
		gauge(c.procVRAM, float64(vram[r.ID]*bytesPerMiB), r.Name, r.Owner.User, r.Job)
	}
	for s, n := range byState {
		gauge(c.procs, float64(n), string(s))
	}

	jobStates := make(map[api.JobState]int, len(api.JobStates))
	for _, s := range api.JobStates {
		jobStates[s] = 0
	}
	for _, j := range jobs {
		jobStates[j.State]++
		if j.Active() && j.Proc != "" {
			gauge(c.jobVRAM, float64(vram[j.Proc]*bytesPerMiB), j.ID, j.Name, j.Owner.User)
		}
	}
	for s, n := range jobStates {
		gauge(c.jobs, float64(n), string(s))
	}
	gauge(c.queueDepth, float64(jobStates[api.JobQueued]))

	pending, held := d.leases.counts()
	gauge(c.leases, float64(pending), "pending")
	gauge(c.leases, float64(held), "held")
}

// collectGPUs sends the per-GPU gauges of sample gv, with the frozen
// memory of table view tv.
func (c *stateCollector) collectGPUs(gauge func(*prometheus.Desc, float64, ...string), gv *gpuView, tv *proctable.View) {
	d := c.d
	total := make(map[string]uint64, len(gv.devices))
	for _, dv := range gv.devices {
		total[dv.UUID] = dv.TotalMiB
	}
	reserved := map[string]map[string]uint64{} // uuid -> kind -> MiB
	add := func(uuid, kind string, n uint64) {
		if reserved[uuid] == nil {
			reserved[uuid] = map[string]uint64{}
		}
		reserved[uuid][kind] += n
	}
	for _, f := range d.fillers.all() {
		add(f.rec.UUID, reservedFiller, d.fillerHeld(f, gv))
	}
	for _, l := range d.leases.granted() {
		for _, uuid := range l.uuids {
			n := l.mib
			if n == 0 { // exclusive: the whole GPU
				n = total[uuid]
			}
			add(uuid, reservedLease, n)
		}
	}
	for _, r := range tv.Records {
		if r.Checkpoint == nil || r.State != api.StateFrozen && r.State != api.StateHibernating {
			continue
		}
		for uuid, n := range r.Checkpoint.VRAM() {
			add(uuid, reservedFrozen, n)
		}
	}
	for _, dv := range gv.devices {
		idx := strconv.Itoa(dv.Index)
		gauge(c.gpuTotal, float64(dv.TotalMiB*bytesPerMiB), idx, dv.UUID)
		gauge(c.gpuUsed, float64(dv.UsedMiB*bytesPerMiB), idx, dv.UUID)
		for _, kind := range []string{reservedFiller, reservedLease, reservedFrozen} {
			gauge(c.gpuReserved, float64(reserved[dv.UUID][kind]*bytesPerMiB), idx, dv.UUID, kind)
		}
		if dv.UtilPercent != nil {
			gauge(c.gpuUtil, float64(*dv.UtilPercent)/100, idx, dv.UUID)
		}
		if dv.PowerWatts != nil {
			gauge(c.gpuPower, *dv.PowerWatts, idx, dv.UUID)
		}
		if dv.TempC != nil {
			gauge(c.gpuTemp, float64(*dv.TempC), idx, dv.UUID)
		}
	}
}

// counts is how many leases are pending and held.
func (s *leaseSet) counts() (pending, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending), len(s.held)
}

func sumMiB(per map[string]uint64) uint64 {
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}
