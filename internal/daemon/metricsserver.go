package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/tcpadmit"
)

// The /metrics endpoint has no authentication, so any local user can
// connect to it: it serves at most metricsMaxConns connections at once
// (more wait in the kernel's listen backlog, costing the daemon no
// descriptor), of which one local user holds at most
// --max-metrics-conns-per-user and root keeps a reserve (tcpadmit),
// and drops the slow and the idle, so that a flood of connections can
// neither take the daemon's file descriptors nor keep another user's or
// the operator's scrape out. A scraper uses one connection.
const (
	metricsMaxConns       = 32
	metricsMaxHeaderBytes = 8 << 10
	// metricsShutdownTimeout bounds how long Run waits for scrapes in
	// progress when it stops serving /metrics.
	metricsShutdownTimeout = 5 * time.Second
)

// Time limits of a /metrics connection; variables so that tests can change
// them.
var (
	// metricsReadTimeout: a request must arrive whole within this long of
	// the accept, or of its first byte on a kept-alive connection.
	metricsReadTimeout = 10 * time.Second
	// metricsWriteTimeout: the answer must be written within this long of
	// the end of the request's header.
	metricsWriteTimeout = 30 * time.Second
	// metricsIdleTimeout: a kept-alive connection with no new request for
	// this long is closed.
	metricsIdleTimeout = 30 * time.Second
)

// serveMetrics starts serving GET /metrics on --metrics-addr, when set, and
// returns the function that stops it (waiting for scrapes in progress). A
// listen failure is an error that names the address.
func (d *Daemon) serveMetrics() (stop func(), err error) {
	if d.metrics == nil {
		return func() {}, nil
	}
	addr, err := d.cfg.MetricsListenAddr()
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", d.cfg.MetricsAddr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: cannot serve metrics on %s: %w", addr, err)
	}
	errLog := zap.NewStdLog(d.log.Named("metrics"))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: errLog, ErrorHandling: promhttp.ContinueOnError, Registry: d.metrics.reg,
	}))
	srv := &http.Server{Handler: mux, ErrorLog: errLog, MaxHeaderBytes: metricsMaxHeaderBytes,
		ReadTimeout: metricsReadTimeout, WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout}
	// A connection past its user's share is closed at once, unanswered.
	conns := limits.NewConns(metricsMaxConns, rootReserve, d.cfg.Limits.MetricsConns)
	limited, noOwners, err := tcpadmit.Listen(ln.(*net.TCPListener), conns, metricsMaxConns, nil, func(err error) {
		d.log.Error("metrics: accept failing; retrying with backoff", zap.String("addr", addr), zap.Error(err))
	})
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: cannot serve metrics on %s: %w", addr, err)
	}
	if noOwners != nil {
		d.log.Warn("metrics: cannot tell local users apart; no user has a share of its own", zap.Error(noOwners))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("metrics server stopped", zap.String("addr", addr), zap.Error(err))
		}
	}()
	d.log.Info("serving metrics", zap.String("url", "http://"+limited.Addr().String()+"/metrics"))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			d.log.Warn("metrics server shutdown", zap.Error(err))
			_ = srv.Close()
		}
		<-done
	}, nil
}
