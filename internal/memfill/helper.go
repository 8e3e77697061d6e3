package memfill

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
)

// HelperArgv0 is the argv[0] under which the gpuschedd binary runs as a
// filler helper.
const HelperArgv0 = "gpusched-filler"

// Defaults of the helper's command line.
const (
	DefaultChunkMiB = 256
	DefaultTick     = 10 * time.Millisecond
	DefaultOrphan   = 10 * time.Minute
)

// IsHelper reports whether this process was started as a filler helper.
func IsHelper() bool { return len(os.Args) > 0 && filepath.Base(os.Args[0]) == HelperArgv0 }

// config is the helper's command line.
type config struct {
	backend  string // "sim" or "cuda"
	uuid     string
	chunkMiB uint64
	socket   string // "" serves no adoption
	simDir   string
	library  string
	tick     time.Duration
	orphan   time.Duration
}

// parseArgs parses the flags after argv[0].
func parseArgs(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet(HelperArgv0, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.backend, "backend", "", "sim or cuda")
	fs.StringVar(&c.uuid, "gpu", "", "the GPU's UUID")
	fs.Uint64Var(&c.chunkMiB, "chunk", DefaultChunkMiB, "allocation chunk in MiB")
	fs.StringVar(&c.socket, "socket", "", "rendezvous socket for re-adoption")
	fs.StringVar(&c.simDir, "sim-dir", "", "sim directory (sim backend)")
	fs.StringVar(&c.library, "library", DefaultLibrary, "driver library (cuda backend)")
	fs.DurationVar(&c.tick, "tick", DefaultTick, "control loop period")
	fs.DurationVar(&c.orphan, "orphan", DefaultOrphan, "release and exit after this long without a controller")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.backend != "sim" && c.backend != "cuda":
		return c, fmt.Errorf("--backend %q: want sim or cuda", c.backend)
	case c.uuid == "":
		return c, errors.New("--gpu is required")
	case c.chunkMiB == 0 || c.chunkMiB > 1<<20:
		return c, fmt.Errorf("--chunk %d: want 1 to %d MiB", c.chunkMiB, 1<<20)
	case c.tick <= 0 || c.orphan <= 0:
		return c, errors.New("--tick and --orphan must be positive")
	case c.backend == "sim" && c.simDir == "":
		return c, errors.New("--backend sim needs --sim-dir")
	}
	return c, nil
}

// HelperMain runs the filler helper and returns its exit status. Its first
// controller is on stdin and stdout; stderr is its log. It ignores SIGINT
// and SIGHUP, outlives its controllers, and on SIGTERM releases everything
// and exits.
func HelperMain() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	logger := log.New(os.Stderr, fmt.Sprintf("%s[%d]: ", HelperArgv0, os.Getpid()), log.LstdFlags|log.Lmicroseconds|log.Lmsgprefix)
	first, err := takeStdio()
	if err != nil {
		logger.Printf("controller pipes: %v", err)
		return 1
	}
	h, err := newHelper(os.Args[1:], logger)
	if err != nil {
		code := codeFailed
		if errors.Is(err, ErrUnsupported) {
			code = codeUnsupported
		}
		logger.Printf("cannot start: %v", err)
		_ = newCtrl("stdio", first).send(message{Error: err.Error(), Code: code})
		return 1
	}
	return h.run(first, term)
}

// helper is a running filler helper: its holder, its rendezvous socket and
// its current controller.
type helper struct {
	cfg   config
	log   *log.Logger
	be    backend
	hold  *holder
	hello hello
	ln    *net.UnixListener // nil without --socket

	mu     sync.Mutex
	cur    *ctrl       // nil while orphaned
	orphan *time.Timer // runs while orphaned

	quitOnce sync.Once
	quit     chan string // why the helper exits
}

// newHelper parses the command line, opens the backend and listens on the
// rendezvous socket.
func newHelper(args []string, logger *log.Logger) (*helper, error) {
	cfg, err := parseArgs(args)
	if err != nil {
		return nil, err
	}
	logger.SetPrefix(fmt.Sprintf("%s[%d] %s: ", HelperArgv0, os.Getpid(), cfg.uuid))
	pid, err := procfs.SelfPID()
	if err != nil {
		return nil, err
	}
	start, err := procfs.StartTime(pid)
	if err != nil {
		return nil, err
	}
	var be backend
	if cfg.backend == "sim" {
		be, err = openSim(cfg.simDir, cfg.uuid, cfg.chunkMiB, pid, start)
	} else {
		be, err = openCUDA(cfg.library, cfg.chunkMiB)
	}
	if err != nil {
		return nil, err
	}
	h := &helper{
		cfg:   cfg,
		log:   logger,
		be:    be,
		hold:  newHolder(be, cfg.chunkMiB, logger),
		hello: hello{PID: pid, Start: start, Backend: cfg.backend, UUID: cfg.uuid, ChunkMiB: cfg.chunkMiB},
		quit:  make(chan string, 1),
	}
	if cfg.socket != "" {
		if h.ln, err = listen(cfg.socket); err != nil {
			be.Close()
			return nil, err
		}
	}
	return h, nil
}

// listen creates the rendezvous socket, replacing a stale file, mode 0600
// (connecting needs write permission, which the umask already denies
// others until the chmod).
func listen(path string) (*net.UnixListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return ln, nil
}

// run serves until a release, an orphan timeout or SIGTERM, then frees
// everything, removes the socket and returns the exit status.
func (h *helper) run(first conn, term <-chan os.Signal) int {
	h.log.Printf("started: backend %s, chunk %d MiB, socket %q, orphan after %v", h.cfg.backend, h.cfg.chunkMiB, h.cfg.socket, h.cfg.orphan)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.hold.run(h.cfg.tick, stop, h.broadcast) })
	if h.ln != nil {
		wg.Go(h.accept)
	}
	h.attach(newCtrl("stdio", first))
	var why string
	select {
	case why = <-h.quit:
	case <-term:
		why = "SIGTERM"
	}
	st := h.hold.releaseAll()
	close(stop)
	if h.ln != nil {
		h.ln.Close() // unlinks the socket
	}
	wg.Wait()
	h.be.Close()
	h.log.Printf("exiting (%s): released everything, %d MiB free of %d", why, st.FreeMiB, st.TotalMiB)
	return 0
}

// exit makes run return.
func (h *helper) exit(why string) {
	h.quitOnce.Do(func() { h.quit <- why })
}

// accept takes new controllers from the rendezvous socket.
func (h *helper) accept() {
	for {
		c, err := h.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			h.log.Printf("accept: %v", err)
			time.Sleep(100 * time.Millisecond) // EMFILE and the like: back off
			continue
		}
		h.attach(newCtrl("socket", c))
	}
}
