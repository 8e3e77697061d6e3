package mps

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/execx"
)

// ControlName is the MPS control binary looked up on PATH.
const ControlName = "nvidia-cuda-mps-control"

// controlPipe is the control daemon's socket in its pipe directory: it is
// there while the daemon serves.
const controlPipe = "control"

// Defaults of Config.
const (
	defaultTimeout = 30 * time.Second
	defaultReady   = 5 * time.Second
	readyPoll      = 10 * time.Millisecond
)

// Config says where the control binary is and where its daemon keeps its
// pipes and logs.
type Config struct {
	// Control is the nvidia-cuda-mps-control binary: a path, or "" to look
	// ControlName up on PATH.
	Control string
	// Dir holds pipe/ (CUDA_MPS_PIPE_DIRECTORY) and log/
	// (CUDA_MPS_LOG_DIRECTORY), created 0755 when the control daemon first
	// starts; it must be reachable by the users whose processes are clients.
	Dir string
	// Timeout bounds one start or stop of the control daemon; 0: 30s.
	Timeout time.Duration
	// Ready bounds the wait for the control pipe after a start; 0: 5s.
	Ready time.Duration
	// Log records what the background stop could not do; nil: none.
	Log *zap.Logger
}

// Manager starts the MPS control daemon for the first client and stops it
// after the last. Its methods are safe for concurrent use.
type Manager struct {
	path    string // the control binary; "" when missing
	missing error  // why path is "", for messages
	dir     string
	pipeDir string
	logDir  string
	timeout time.Duration
	ready   time.Duration
	log     *zap.Logger

	op sync.Mutex // held while the control daemon is started or stopped

	mu       sync.Mutex
	clients  map[string]struct{} // record ids of the clients
	running  bool                // the control daemon was started (or adopted) and not stopped
	stopping bool                // a background stop is pending
	closed   bool
	wg       sync.WaitGroup // background stops
}

// New looks up the control binary and returns a Manager; a missing binary
// is no error here (Check reports it).
func New(cfg Config) *Manager {
	m := &Manager{
		dir:     cfg.Dir,
		pipeDir: filepath.Join(cfg.Dir, "pipe"),
		logDir:  filepath.Join(cfg.Dir, "log"),
		timeout: cfg.Timeout,
		ready:   cfg.Ready,
		log:     cfg.Log,
		clients: map[string]struct{}{},
	}
	if m.timeout <= 0 {
		m.timeout = defaultTimeout
	}
	if m.ready <= 0 {
		m.ready = defaultReady
	}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	switch {
	case cfg.Control == "":
		m.path, m.missing = execx.LookPath(ControlName)
		if m.missing != nil {
			m.missing = fmt.Errorf("%s was not found on the daemon's PATH", ControlName)
		}
	default:
		if fi, err := os.Stat(cfg.Control); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			m.missing = fmt.Errorf("%s was not found at %s", ControlName, cfg.Control)
		} else {
			m.path = cfg.Control
		}
	}
	return m
}

// Available reports whether MPS can be used: the control binary was found.
func (m *Manager) Available() bool { return m.path != "" }

// Check returns nil when MPS can be used, else an error matching
// ErrUnavailable that says why, for a request that asked for attr (such as
// "mps_threads").
func (m *Manager) Check(attr string) error {
	if m.path != "" {
		return nil
	}
	return unavailable("%s needs NVIDIA MPS: %v (install the NVIDIA driver's compute utilities, or give gpuschedd --mps-control PATH)",
		attr, m.missing)
}

// PipeDir is the CUDA_MPS_PIPE_DIRECTORY of the control daemon and its
// clients.
func (m *Manager) PipeDir() string { return m.pipeDir }

// Clients lists the record ids of the current clients, sorted.
func (m *Manager) Clients() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.clients))
	for id := range m.clients {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Running reports whether the control daemon is up, as far as the Manager
// knows.
func (m *Manager) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running
}

// Acquire counts id as a client, starting the control daemon first if it
// is not running. On error id is not counted.
func (m *Manager) Acquire(ctx context.Context, id string) error {
	if m.path == "" {
		return unavailable("NVIDIA MPS: %v", m.missing)
	}
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return unavailable("NVIDIA MPS: the daemon is shutting down")
	}
	up := m.running
	m.mu.Unlock()
	// A control daemon that died under its clients (its pipe is gone) is
	// started again for the new one.
	if !up || !m.pipeExists() {
		if err := m.start(ctx); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.running = true
	m.clients[id] = struct{}{}
	m.mu.Unlock()
	return nil
}

// Release forgets the client id (an unknown id is no error). When it was
// the last, the control daemon is stopped in the background. Release never
// blocks on a command, so it may be called from a change hook.
func (m *Manager) Release(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.clients[id]; !ok {
		return
	}
	delete(m.clients, id)
	if len(m.clients) > 0 || !m.running || m.stopping || m.closed {
		return
	}
	m.stopping = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.stopIdle()
	}()
}

// stopIdle stops the control daemon unless a client came meanwhile.
func (m *Manager) stopIdle() {
	m.op.Lock()
	defer m.op.Unlock()
	m.mu.Lock()
	m.stopping = false
	idle := len(m.clients) == 0 && m.running
	m.mu.Unlock()
	if !idle {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	if err := m.stop(ctx); err != nil {
		m.log.Error("stop the MPS control daemon", zap.String("pipe_dir", m.pipeDir), zap.Error(err))
	}
	m.mu.Lock()
	m.running = false
	m.mu.Unlock()
}

// Adopt takes ids (record ids of live clients, after a daemon restart) as
// the clients. The control daemon they use is taken as running when its
// pipe is there; one that no client needs any more is stopped now.
func (m *Manager) Adopt(ctx context.Context, ids []string) error {
	m.op.Lock()
	defer m.op.Unlock()
	up := m.pipeExists()
	m.mu.Lock()
	for _, id := range ids {
		m.clients[id] = struct{}{}
	}
	m.running = up && len(m.clients) > 0
	m.mu.Unlock()
	if !up || len(ids) > 0 || m.path == "" {
		return nil
	}
	if err := m.stop(ctx); err != nil {
		return fmt.Errorf("stop the MPS control daemon no client needs: %w", err)
	}
	return nil
}

// Close waits for a background stop in progress; the control daemon of
// live clients keeps running for them (and for the next daemon to adopt).
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// start runs the control daemon and waits for its pipe.
func (m *Manager) start(ctx context.Context) error {
	for _, dir := range []string{m.dir, m.pipeDir, m.logDir} {
		if err := mkdir(dir); err != nil {
			return fmt.Errorf("start the MPS control daemon: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if _, err := execx.Run(ctx, execx.Cmd{Path: m.path, Args: []string{"-d"}, Env: m.env()}); err != nil {
		return unavailable("start the MPS control daemon: %v", err)
	}
	deadline := time.NewTimer(m.ready)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for !m.pipeExists() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("start the MPS control daemon: %w", ctx.Err())
		case <-deadline.C:
			return unavailable("start the MPS control daemon: %s -d returned, but its control pipe did not appear in %s within %v (see the logs in %s)",
				m.path, m.pipeDir, m.ready, m.logDir)
		case <-tick.C:
		}
	}
	m.log.Info("MPS control daemon started", zap.String("pipe_dir", m.pipeDir))
	return nil
}

// stop asks the control daemon to quit.
func (m *Manager) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if _, err := execx.Run(ctx, execx.Cmd{Path: m.path, Env: m.env(), Stdin: []byte("quit\n")}); err != nil {
		return err
	}
	m.log.Info("MPS control daemon stopped", zap.String("pipe_dir", m.pipeDir))
	return nil
}

// env is the control binary's environment: the minimal one with the
// Manager's directories.
func (m *Manager) env() []string {
	env := append([]string{}, execx.MinimalEnv...)
	return append(env, EnvPipeDir+"="+m.pipeDir, EnvLogDir+"="+m.logDir)
}

func (m *Manager) pipeExists() bool {
	_, err := os.Lstat(filepath.Join(m.pipeDir, controlPipe))
	return err == nil
}

// mkdir creates dir (and its parents) and makes it 0755 whatever the umask.
func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o755)
}
