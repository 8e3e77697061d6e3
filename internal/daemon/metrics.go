package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gpusched/gpusched/internal/jobqueue"
)

// Prometheus metrics (--metrics-addr): gauges are read from the daemon's
// snapshots at scrape time by a collector (metrics_collect.go), so nothing
// is kept in step with the state; counters and histograms are updated
// where requests are answered and operations finish. docs/metrics.md lists
// every metric.

// metricsNamespace prefixes every gpusched metric.
const metricsNamespace = "gpusched"

// Label values of gpusched_checkpoint_*{op}.
const (
	opFreeze    = "freeze"
	opThaw      = "thaw"
	opHibernate = "hibernate"
	opRestore   = "restore"
)

// Label values of gpusched_api_requests_total that are not a method or a
// wire code.
const (
	methodUnknown = "unknown"  // a request with no known method (bounded label values)
	codeOK        = "ok"       // answered with a result
	codeCanceled  = "canceled" // the caller hung up before the answer
)

// Histogram buckets, in seconds: checkpoint operations take from a
// millisecond (a small simulated freeze) to minutes (a large dump); queue
// waits from the dispatch target (under 50ms) to a day.
var (
	checkpointBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300, 600}
	queueWaitBuckets  = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400}
)

// metrics holds the daemon's Prometheus registry and the metrics updated
// at operation sites. A nil *metrics (metrics off) ignores every update.
type metrics struct {
	reg       *prometheus.Registry
	known     map[string]bool // canonical method names, for the method label
	requests  *prometheus.CounterVec
	ckptTime  *prometheus.HistogramVec
	ckptBytes *prometheus.CounterVec
	queueWait prometheus.Histogram
	rtExits   prometheus.Counter
	rtNow     prometheus.Gauge
}

// newMetrics builds the registry for d, or returns nil when --metrics-addr
// is off. d.methods must be set.
func newMetrics(d *Daemon) *metrics {
	if d.cfg.MetricsAddr == "" {
		return nil
	}
	m := &metrics{reg: prometheus.NewRegistry(), known: make(map[string]bool, len(d.methods))}
	for name := range d.methods {
		m.known[name] = true
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "api_requests_total",
		Help: `Requests answered on the socket, by method and outcome: code "ok" for a result, else the wire error code ("canceled" when the caller hung up first); method "unknown" for requests with no known method.`,
	}, []string{"method", "code"})
	m.ckptTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Name: "checkpoint_duration_seconds",
		Help:    "Duration of successful checkpoint operations, as their results' total: freeze (GPU to host RAM), thaw (host RAM to GPU, admission wait included), hibernate (to disk, including the freeze of a running process), restore (a thaw from disk, including its thaw). Failed operations are not observed; see gpusched_api_requests_total.",
		Buckets: checkpointBuckets,
	}, []string{"op"})
	m.ckptBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "checkpoint_bytes_total",
		Help: "Bytes moved by successful checkpoint operations: GPU memory for freeze and thaw, image bytes written for hibernate, image bytes (with parents) read for restore.",
	}, []string{"op"})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Name: "queue_wait_seconds",
		Help:    "Time queued jobs waited before an attempt started: from submission (or the end of the previous attempt, for a retry) to placement starting it.",
		Buckets: queueWaitBuckets,
	})
	m.rtExits = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "daemon_realtime_exits_total",
		Help: "Times the daemon's threads left the real-time class (--realtime-priority) for having used more than --realtime-cpu; they come back once it is within again.",
	})
	m.rtNow = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "daemon_realtime",
		Help: "1 while the daemon's threads run in the real-time class (--realtime-priority), 0 while they run in the fair class: the setting off, refused by the kernel, or over --realtime-cpu.",
	})
	for _, op := range []string{opFreeze, opThaw, opHibernate, opRestore} {
		m.ckptTime.WithLabelValues(op)
		m.ckptBytes.WithLabelValues(op)
	}
	m.reg.MustRegister(m.requests, m.ckptTime, m.ckptBytes, m.queueWait, m.rtExits, m.rtNow, newStateCollector(d),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// request counts one answered request. method is bucketed as "unknown"
// unless it is a method of the daemon, so that callers cannot create
// label values.
func (m *metrics) request(method string, code string) {
	if m == nil {
		return
	}
	if !m.known[method] {
		method = methodUnknown
	}
	m.requests.WithLabelValues(method, code).Inc()
}

// realtime records the daemon's threads entering real time, or leaving it
// over --realtime-cpu.
func (m *metrics) realtime(on bool) {
	if m == nil {
		return
	}
	if on {
		m.rtNow.Set(1)
		return
	}
	m.rtNow.Set(0)
	m.rtExits.Inc()
}

// checkpointDone observes one successful checkpoint operation.
func (m *metrics) checkpointDone(op string, took time.Duration, bytes uint64) {
	if m == nil {
		return
	}
	m.ckptTime.WithLabelValues(op).Observe(took.Seconds())
	m.ckptBytes.WithLabelValues(op).Add(float64(bytes))
}

// queuedSince is when queued job j began to wait for its next attempt:
// its submission, or the end of its previous attempt (a retry).
func queuedSince(j *jobqueue.Job) time.Time {
	since := j.SubmittedAt
	if a := j.Current(); a != nil && a.EndedAt.After(since) {
		since = a.EndedAt
	}
	return since
}

// queueWaited observes a job's wait in the queue, from since to the start
// of its attempt at at.
func (m *metrics) queueWaited(since, at time.Time) {
	if m == nil || since.IsZero() || at.Before(since) {
		return
	}
	m.queueWait.Observe(at.Sub(since).Seconds())
}

// chainBytes is the disk space of snapshot id and the parents it needs: what
// a restore from it reads.
func (d *Daemon) chainBytes(id string) uint64 {
	var n uint64
	for _, s := range d.snaps.Chain(id) {
		if m, ok := d.snaps.Get(s); ok {
			n += m.Bytes
		}
	}
	return n
}
