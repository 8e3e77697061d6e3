package router

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Router routes requests to the models of its config and wakes them.
type Router struct {
	cfg     *Config
	d       Daemon
	log     *zap.Logger
	stdLog  *log.Logger
	metrics *metrics
	proxies map[string]*httputil.ReverseProxy
	env     map[string]string // the environment models start with: the router's own
	started time.Time

	ctx context.Context // the router's lifetime: wakes and idle freezes run under it
	wg  sync.WaitGroup  // wakes in progress

	mu      sync.Mutex
	models  map[string]*model
	changed chan struct{} // closed and replaced when a hold, wake or turn changes
	tickets uint64
}

// New builds a router over d. It serves nothing until Serve.
func New(cfg *Config, d Daemon, logger *zap.Logger) *Router {
	r := &Router{
		cfg: cfg, d: d, log: logger, metrics: newMetrics(),
		proxies: map[string]*httputil.ReverseProxy{}, env: environ(), started: time.Now(),
		ctx: context.Background(), models: map[string]*model{}, changed: make(chan struct{}),
	}
	r.stdLog = zap.NewStdLog(logger.Named("http"))
	for name, m := range cfg.Models {
		mm := &model{cfg: m, transport: newTransport(), met: r.metrics.forModel(name)}
		r.models[name] = mm
		r.proxies[name] = r.newProxy(mm)
	}
	return r
}

// Serve serves ln until ctx ends, then stops taking requests, lets those
// in flight finish (for at most the drain grace) and waits for wakes.
func (r *Router) Serve(ctx context.Context, ln net.Listener) error {
	var cancel context.CancelFunc
	r.ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: r.stdLog,
		BaseContext: func(net.Listener) context.Context { return r.ctx }}
	for _, n := range r.cfg.Names() {
		if m := r.models[n]; m.cfg.Preload {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.preload(m)
			}()
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	r.log.Info("serving", zap.String("listen", ln.Addr().String()), zap.Int("models", len(r.models)))
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		shut, stop := context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
		err = srv.Shutdown(shut)
		stop()
		if err == nil {
			err = ctx.Err()
		}
	}
	cancel()
	r.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// drainGrace bounds how long a stopping router waits for requests in flight.
const drainGrace = 30 * time.Second

// preload wakes m at start and lets it go (its idle ttl then applies).
func (r *Router) preload(m *model) {
	l, err := r.acquire(r.ctx, m)
	if err != nil {
		r.log.Warn("preload", zapModel(m), zap.Error(err))
		return
	}
	l.end()
}

// environ is the router's environment as a map, for the models it starts.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
