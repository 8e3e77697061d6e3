package router

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/tcpadmit"
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
	bodies  *limits.Bytes // request bodies held whole, by the local user who sent them
	states  *processStates

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
		bodies: limits.NewBytes(cfg.BodyBudget, cfg.BodyPerUser), states: &processStates{d: d, ttl: statesTTL},
	}
	r.stdLog = zap.NewStdLog(logger.Named("http"))
	for name, m := range cfg.Models {
		mm := &model{cfg: m, transport: newTransport(), met: r.metrics.forModel(name), leases: map[*lease]struct{}{}}
		switch {
		case m.Slots > 0:
			mm.slots = limits.NewFair(m.Slots)
		case !m.SlotsSet: // no number known yet: no bound until the server gives one (learnSlots)
			mm.slots = limits.NewFair(maxSlots)
		}
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
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: r.cfg.IdleTimeout,
		ErrorLog: r.stdLog, BaseContext: func(net.Listener) context.Context { return r.ctx }, ConnContext: withPeerUID}
	ln, aerr := r.admit(ln)
	if aerr != nil {
		return aerr
	}
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

// refusal answers a connection past its user's share, or past what all
// users but root may hold, before closing it.
var refusal = []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
	len(refusalBody), refusalBody))

const refusalBody = "too many connections to gpusched-router: your user holds its share (max_conns_per_user), or the users together all they may; retry later\n"

// admit holds a TCP listener's connections to MaxConns at once, each
// local user (the uid owning the peer's socket) to ConnsPerUser of them:
// any local user may connect, and one who opened connections without end
// took every descriptor of the router (tcpadmit). Another listener (a
// test's) is served as it is.
func (r *Router) admit(ln net.Listener) (net.Listener, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return ln, nil
	}
	conns := limits.NewConns(r.cfg.MaxConns, rootReserve, r.cfg.ConnsPerUser)
	l, noOwners, err := tcpadmit.Listen(tl, conns, r.cfg.MaxConns, refusal, func(err error) {
		r.log.Error("accept failing; retrying with backoff", zap.Error(err))
	})
	if err != nil {
		return nil, err
	}
	if noOwners != nil {
		r.log.Warn("cannot tell local users apart; no user has a share of the connections", zap.Error(noOwners))
	}
	return l, nil
}

// peerUIDKey keys a request's context with the uid owning its client's
// socket.
type peerUIDKey struct{}

// withPeerUID is the http.Server's ConnContext: it records the uid
// owning c's peer, where tcpadmit knows it.
func withPeerUID(ctx context.Context, c net.Conn) context.Context {
	if uid, ok := tcpadmit.PeerUID(c); ok {
		return context.WithValue(ctx, peerUIDKey{}, uid)
	}
	return ctx
}

// peerUID is the uid owning the client's socket of the request with ctx;
// limits.AnyPeer where it is not known.
func peerUID(ctx context.Context) uint32 {
	if uid, ok := ctx.Value(peerUIDKey{}).(uint32); ok {
		return uid
	}
	return limits.AnyPeer
}

// rootReserve is how many connections only root may take.
const rootReserve = 8

// preload wakes m at start and lets it go (its idle ttl then applies).
func (r *Router) preload(m *model) {
	l, err := r.acquire(r.ctx, m, nil)
	if err != nil {
		r.log.Warn("preload", zapModel(m), zap.Error(err))
		return
	}
	l.end()
}

// modelEnv is the environment m's server starts with: the router's, and
// model_key in m's model_key_env. The key goes in the environment, which
// only its user and root may read (/proc/PID/environ), not on the command
// line, which /proc shows every local user.
func (r *Router) modelEnv(m *Model) map[string]string {
	if m.KeyEnv == "" {
		return r.env
	}
	env := maps.Clone(r.env)
	env[m.KeyEnv] = r.cfg.ModelKey
	return env
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
