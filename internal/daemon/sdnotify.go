package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/pkg/api"
)

// statusEvery is how often the STATUS= line systemd shows is brought up to
// date (only sent when it changed).
const statusEvery = 2 * time.Second

// notifyTimeout bounds one sd_notify send. systemd reads its socket at
// once; one that nobody reads (a wedged manager, a queue filled by an
// earlier run of STATUS= lines) must not hold the daemon, its shutdown
// least of all: what cannot be queued in time is dropped.
const notifyTimeout = time.Second

// sdNotify sends one sd_notify state; a no-op without NOTIFY_SOCKET. It is
// go-systemd's SdNotify with a deadline.
func sdNotify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(notifyTimeout))
	_, _ = conn.Write([]byte(state))
}

// superviseSystemd keeps systemd told how the daemon is, until ctx ends:
// a STATUS= line with its counts whenever they change and, when the unit
// sets WatchdogSec=, WATCHDOG=1 every half interval, but only while the
// daemon answers a status request on its own socket and its GPU sampler
// goes round. A wedged daemon stops pinging, and systemd restarts it
// (Restart=on-failure); its processes keep running and are re-adopted.
func (d *Daemon) superviseSystemd(ctx context.Context) {
	interval, err := sdnotify.SdWatchdogEnabled(false)
	if err != nil {
		d.log.Warn("systemd watchdog settings unreadable; not pinging", zap.Error(err))
	}
	every := statusEvery
	if interval > 0 {
		every = min(every, interval/2)
		d.log.Info("systemd watchdog", zap.Duration("interval", interval), zap.Duration("ping_every", every))
	}
	w := watchdog{every: every, ping: interval > 0, alive: d.alive, status: d.statusLine, notify: sdNotify, log: d.log}
	w.run(ctx)
}

// watchdog is the loop of superviseSystemd, with its checks and its sink
// injected.
type watchdog struct {
	every  time.Duration
	ping   bool                            // send WATCHDOG=1 (the unit has WatchdogSec=)
	alive  func(ctx context.Context) error // nil while the daemon works
	status func() string
	notify func(state string)
	log    *zap.Logger
}

func (w watchdog) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	var lastStatus string
	var wedged error
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s := w.status(); s != lastStatus {
			w.notify("STATUS=" + s)
			lastStatus = s
		}
		if !w.ping {
			continue
		}
		check, cancel := context.WithTimeout(ctx, w.every)
		err := w.alive(check)
		cancel()
		switch {
		case err == nil:
			if wedged != nil {
				w.log.Info("watchdog: the daemon answers again; pinging")
			}
			w.notify("WATCHDOG=1")
		case ctx.Err() != nil:
			return
		case wedged == nil:
			w.log.Error("watchdog: not pinging systemd; it restarts the daemon if this lasts", zap.Error(err))
		}
		wedged = err
	}
}

// alive checks what a wedged daemon would fail: a status request through
// its own socket (accept loop, dispatch, table) answered before ctx ends,
// and a GPU sampler that went round within a few polls.
func (d *Daemon) alive(ctx context.Context) error {
	if idle, limit := d.sampler.idleFor(time.Now(), d.startedAt), 3*d.cfg.GPUPoll+10*time.Second; idle > limit {
		return fmt.Errorf("the GPU sampler has not finished a round for %v", idle.Round(time.Millisecond))
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", d.cfg.Socket)
	if err != nil {
		return fmt.Errorf("own socket: %w", err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte(`{"method":"` + api.MethodStatus + `"}` + "\n")); err != nil {
		return fmt.Errorf("own socket: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("own socket: no answer to status: %w", err)
	}
	var resp api.Response
	if err := json.Unmarshal(line, &resp); err != nil || !resp.OK {
		return fmt.Errorf("own socket: status answered %.200s", line)
	}
	return nil
}

// statusLine is what `systemctl status gpuschedd` shows: the counts of
// processes by state, jobs waiting and running, leases and fillers.
func (d *Daemon) statusLine() string {
	states := map[string]int{}
	n := 0
	for _, r := range d.table.View().Records {
		states[string(r.State)]++
		n++
	}
	parts := make([]string, 0, len(states))
	for s, k := range states {
		parts = append(parts, fmt.Sprintf("%d %s", k, s))
	}
	sort.Strings(parts)
	line := api.Plural(n, "process", "processes")
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	queued, running := 0, 0
	for _, byState := range d.jobs.States() {
		queued += byState[api.JobQueued]
		running += byState[api.JobStarting] + byState[api.JobRunning]
	}
	return fmt.Sprintf("%s; jobs: %d queued, %d running; %s, %s", line, queued, running,
		api.Plural(len(d.leases.granted()), "lease", "leases"), api.Plural(len(d.fillersAPI()), "filler", "fillers"))
}
