package router

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's Prometheus series, labelled by configured
// model name only (the label set is bounded by the config).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec   // model, code
	inflight     *prometheus.GaugeVec     // model
	waiting      *prometheus.GaugeVec     // model
	queued       *prometheus.GaugeVec     // model
	waitSeconds  *prometheus.HistogramVec // model
	wakeSeconds  *prometheus.HistogramVec // model, tier
	wakeFailures *prometheus.CounterVec   // model
	unloads      *prometheus.CounterVec   // model
	upstreamErrs *prometheus.CounterVec   // model
	turnCuts     *prometheus.CounterVec   // model
	slotCuts     *prometheus.CounterVec   // model
}

// wakeBuckets span a hold of a running model (sub-millisecond) to a cold
// start of a large one (minutes).
var wakeBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics() *metrics {
	const ns = "gpusched_router"
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests routed to a model, by HTTP status answered."}, []string{"model", "code"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "in_flight",
			Help: "Requests admitted to a model and not yet answered."}, []string{"model"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "waiting",
			Help: "Requests waiting for their model to wake or for its turn."}, []string{"model"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "queued",
			Help: "Requests admitted to a model and waiting for one of its slots."}, []string{"model"}),
		waitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wait_seconds",
			Help: "Time requests that had to wait spent waiting for their model.", Buckets: wakeBuckets}, []string{"model"}),
		wakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wake_seconds",
			Help:    "Time a wake took, by the tier the model woke from: cold (started), frozen (host RAM), hibernated (disk) or running (held only).",
			Buckets: wakeBuckets}, []string{"model", "tier"}),
		wakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "wake_failures_total",
			Help: "Wakes that failed (the waiting requests got the error)."}, []string{"model"}),
		unloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "unloads_total",
			Help: "Freezes of a model by its idle ttl or by /unload."}, []string{"model"}),
		upstreamErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "upstream_errors_total",
			Help: "Requests a model's server failed (connection refused or broken mid-request)."}, []string{"model"}),
		turnCuts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "turn_cuts_total",
			Help: "Requests cut because their model held its GPUs turn_timeout while another model waited for them."}, []string{"model"}),
		slotCuts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "slot_cuts_total",
			Help: "Requests cut because their user held more of the model's slots than another user who waited turn_timeout for one."}, []string{"model"}),
	}
	m.reg.MustRegister(m.requests, m.inflight, m.waiting, m.queued, m.waitSeconds, m.wakeSeconds, m.wakeFailures, m.unloads, m.upstreamErrs, m.turnCuts, m.slotCuts)
	return m
}

// modelMetrics are one model's series that every request touches,
// looked up once: a label lookup hashes the label values on each use.
type modelMetrics struct {
	name        string
	vec         *metrics
	inflight    prometheus.Gauge
	waiting     prometheus.Gauge
	queued      prometheus.Gauge
	waitSeconds prometheus.Observer
	ok          prometheus.Counter // requests answered 200
}

func (m *metrics) forModel(name string) *modelMetrics {
	return &modelMetrics{
		name: name, vec: m,
		inflight:    m.inflight.WithLabelValues(name),
		waiting:     m.waiting.WithLabelValues(name),
		queued:      m.queued.WithLabelValues(name),
		waitSeconds: m.waitSeconds.WithLabelValues(name),
		ok:          m.requests.WithLabelValues(name, strconv.Itoa(http.StatusOK)),
	}
}

// answered counts a request answered with code.
func (mm *modelMetrics) answered(code int) {
	if code == http.StatusOK {
		mm.ok.Inc()
		return
	}
	mm.vec.requests.WithLabelValues(mm.name, strconv.Itoa(code)).Inc()
}
