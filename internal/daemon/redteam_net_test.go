package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// metricsFloodEnv makes the test binary a helper that floods a metrics
// port as another user (see startMetricsFlood). Its value is
// "uid:gid:conns:requests:addr".
const metricsFloodEnv = "GPUSCHED_TEST_METRICS_FLOOD"

func init() {
	if spec := os.Getenv(metricsFloodEnv); spec != "" {
		if err := metricsFloodHelper(spec); err != nil {
			fmt.Fprintln(os.Stderr, "metrics flood helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// metricsFloodHelper drops to the given uid and gid, opens conns
// connections to addr, sends a keep-alive request on the first requests of
// them and never reads, says "ready" and holds them all until its stdin
// closes.
func metricsFloodHelper(spec string) error {
	parts := strings.SplitN(spec, ":", 5)
	if len(parts) != 5 {
		return fmt.Errorf("bad spec %q", spec)
	}
	var n [4]int
	for i := range n {
		v, err := strconv.Atoi(parts[i])
		if err != nil {
			return fmt.Errorf("bad spec %q: %w", spec, err)
		}
		n[i] = v
	}
	uid, gid, count, requests, addr := n[0], n[1], n[2], n[3], parts[4]
	// Go applies these to every thread of the process.
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setgid(gid); err != nil {
		return err
	}
	if err := syscall.Setuid(uid); err != nil {
		return err
	}
	conns := make([]net.Conn, 0, count)
	for i := range count {
		c, err := net.Dial("tcp", addr) // completes in the kernel's backlog, accepted or not
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		if i < requests {
			if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: flood\r\n\r\n")); err != nil {
				return fmt.Errorf("request on connection %d: %w", i, err)
			}
		}
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(conns)
	return nil
}

// startMetricsFlood runs the flood helper as u and returns once its
// connections are all open; stop (also run at cleanup) ends it, closing
// them all.
func startMetricsFlood(t testing.TB, u testutil.User, addr string, conns, requests int) (stop func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d:%d:%d:%s", metricsFloodEnv, u.UID, u.GID, conns, requests, addr))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		stop()
		t.Fatalf("metrics flood as %s did not start: %q %s", u.Name, line, stderr.Bytes())
	}
	return stop
}

// acceptBacklog is how many connections wait in the accept queue of the
// TCP listener on addr: the rx_queue of its LISTEN line in /proc/net/tcp.
func acceptBacklog(t *testing.T, addr string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != "0A" || procNetAddr(t, f[1]) != addr {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseUint(rx, 16, 32)
		if err != nil {
			t.Fatalf("rx_queue in %q: %v", line, err)
		}
		return int(n)
	}
	t.Fatalf("no listener on %s in /proc/net/tcp", addr)
	return 0
}

// setMetricsTimeouts sets the metrics endpoint's time limits for one
// test. Call it before starting the daemon: the cleanup that restores them
// then runs after the daemon has stopped.
func setMetricsTimeouts(t testing.TB, read, write, idle time.Duration) {
	oldRead, oldWrite, oldIdle := metricsReadTimeout, metricsWriteTimeout, metricsIdleTimeout
	metricsReadTimeout, metricsWriteTimeout, metricsIdleTimeout = read, write, idle
	t.Cleanup(func() { metricsReadTimeout, metricsWriteTimeout, metricsIdleTimeout = oldRead, oldWrite, oldIdle })
}

// TestRedteamMetricsFlood: a local user outside the socket's group opens
// many times more idle connections to the metrics port than it serves,
// some kept alive after a request: the daemon keeps no more than the
// user's share of them (it closes the rest at once), another user's run
// and ps still work, and scrapes work again once the flood ends.
func TestRedteamMetricsFlood(t *testing.T) {
	const floodConns = 1500
	setMetricsTimeouts(t, time.Minute, time.Minute, time.Minute) // nothing of the flood times out while it is measured
	attacker := testutil.NewUser(t, "gsnet3", "gsnetx")
	other := testutil.NewUser(t, "gsnet2", "gsnet")
	addr := testutil.FreeLoopback(t)
	h := newHarness(t, func(c *config.Config) { c.Group = "gsnet"; c.MetricsAddr = addr })
	scrape(t, addr)
	base := fdCount(t, os.Getpid())
	share := config.DefaultLimits().MetricsConns
	bound := base + share + 16 // the flood helper's pipes, the harness's own churn

	stop := startMetricsFlood(t, attacker, addr, floodConns, 2*metricsMaxConns)
	// Polled: the kernel gives no event for a daemon that has accepted all
	// it will. One that keeps what it accepts fails the bound on the way.
	for guard := time.Now().Add(time.Minute); acceptBacklog(t, addr) > 0; {
		if n := fdCount(t, os.Getpid()); n > bound {
			t.Fatalf("the daemon holds %d descriptors under a flood of %d metrics connections (%d before it, share %d)", n, floodConns, base, share)
		}
		if time.Now().After(guard) {
			t.Fatalf("after a minute %d of %d flood connections still wait in the backlog", acceptBacklog(t, addr), floodConns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := fdCount(t, os.Getpid()); n > bound {
		t.Fatalf("the daemon holds %d descriptors under the flood (%d before it, share %d)", n, base, share)
	}

	if _, errOut, code := h.ctlAs(other, "run", "--dir", "/", "calm", "--", "sleep", "1000"); code != 0 {
		t.Fatalf("run by another user during the flood: exit %d: %s", code, errOut)
	}
	if out, errOut, code := h.ctlAs(other, "ps"); code != 0 || !strings.Contains(out, "calm") {
		t.Fatalf("ps by another user during the flood: exit %d: %s%s", code, out, errOut)
	}

	stop()
	scrape(t, addr)
}

// expectHangup reads c until the daemon closes it, failing t if it is
// still open after 30 seconds (a guard, not a timing assert).
func expectHangup(t *testing.T, what string, c net.Conn, r io.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after 30s", what)
	}
}

// TestMetricsIdleConnsClosed: the metrics endpoint closes a kept-alive
// connection that sends no next request, one that never sends a request,
// and one whose request header never ends.
func TestMetricsIdleConnsClosed(t *testing.T) {
	setMetricsTimeouts(t, 300*time.Millisecond, time.Minute, 300*time.Millisecond)
	addr := testutil.FreeLoopback(t)
	newHarness(t, func(c *config.Config) { c.MetricsAddr = addr })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	kept := dial()
	if _, err := kept.Write([]byte("GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(kept)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("scrape: %s, close %v, %v", resp.Status, resp.Close, err)
	}
	expectHangup(t, "kept-alive connection", kept, r)

	silent := dial()
	expectHangup(t, "connection that sends nothing", silent, silent)

	partial := dial()
	if _, err := partial.Write([]byte("GET /metrics HTTP/1.1\r\nHost: test\r\n")); err != nil {
		t.Fatal(err)
	}
	expectHangup(t, "unfinished request header", partial, partial)
}

// lookupUser is u as os/user has it, for rawAs.
func lookupUser(t *testing.T, u testutil.User) *user.User {
	t.Helper()
	uu, err := user.Lookup(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	return uu
}

// TestRedteamConnsPerUser: a user who opens connections past
// --max-conns-per-user is refused with resource_exhausted naming the flag,
// while another user still gets in; once the users together hold all of
// --max-conns but root's reserve, they are refused but root and the
// watchdog's own status check still get in; a connection closed gives its
// user's slot back.
func TestRedteamConnsPerUser(t *testing.T) {
	const maxConns, perUser = 12, 4 // root's reserve: 6
	hog := testutil.NewUser(t, "gsnet1", "gsnet")
	other := testutil.NewUser(t, "gsnet2", "gsnet")
	h := newHarness(t, func(c *config.Config) {
		c.Group = "gsnet"
		c.MaxConns = maxConns
		c.Limits.ConnsPerUser = perUser
	})
	group := strconv.Itoa(int(hog.GroupGID))
	dial := func(u testutil.User) *rawConn { return h.rawAs(lookupUser(t, u), group) }
	hello := func(who string, rc *rawConn) {
		t.Helper()
		if r := rc.call(api.MethodHello, nil); r["ok"] != true {
			t.Fatalf("%s: %v", who, r)
		}
	}
	refused := func(who string, rc *rawConn, code api.Code, says ...string) {
		t.Helper()
		_, _ = rc.c.Write([]byte(`{"method":"hello"}` + "\n")) // a refused one may be closed already
		r := rc.recv()
		msg, _ := r["error"].(string)
		if r["code"] != string(code) {
			t.Fatalf("%s: got %v, want code %s", who, r, code)
		}
		for _, s := range says {
			if !strings.Contains(msg, s) {
				t.Fatalf("%s: refusal %q does not say %q", who, msg, s)
			}
		}
		if rest := rc.expectClosed(); len(rest) != 0 {
			t.Fatalf("%s: more than one line after the refusal: %q", who, rest)
		}
	}

	var hogs []*rawConn
	for i := range perUser {
		rc := dial(hog)
		hello(fmt.Sprintf("%s's connection %d of %d", hog.Name, i+1, perUser), rc)
		hogs = append(hogs, rc)
	}
	refused(hog.Name+" past its share", dial(hog), api.CodeResourceExhausted, "--max-conns-per-user", hog.Name)
	out, errOut, code := h.ctlAs(hog, "ps")
	if code == 0 || !strings.Contains(errOut, "--max-conns-per-user") {
		t.Fatalf("gpuschedctl as %s past its share: exit %d: %s%s", hog.Name, code, out, errOut)
	}

	users := maxConns - min(rootReserve, maxConns/2)
	for i := perUser; i < users; i++ {
		hello(fmt.Sprintf("%s while %s holds its share", other.Name, hog.Name), dial(other))
	}
	refused(other.Name+" once users hold all but root's reserve", dial(other), api.CodeUnavailable, "too many connections")
	for i := range maxConns - users - 1 {
		hello(fmt.Sprintf("root's connection %d in the reserve", i+1), h.raw())
	}
	if err := h.d.alive(ctxT(t)); err != nil {
		t.Fatalf("watchdog check while the users hold all they may: %v", err)
	}

	// A closed connection gives its slot back once the daemon has read
	// the close; until then a retry may still be refused.
	if err := hogs[0].c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	hogs[0].expectClosed()
	for attempt := 0; ; attempt++ {
		rc := dial(hog)
		_, _ = rc.c.Write([]byte(`{"method":"hello"}` + "\n"))
		r := rc.recv()
		if r["ok"] == true {
			break
		}
		if r["code"] != string(api.CodeResourceExhausted) || attempt == 100 {
			t.Fatalf("%s after closing a connection (attempt %d): %v", hog.Name, attempt+1, r)
		}
	}
}

// failingAcceptor fails its first fails accepts with EMFILE, as a daemon
// out of descriptors does, then closes failed and blocks until ctx ends.
type failingAcceptor struct {
	ctx    context.Context
	fails  int
	calls  int
	failed chan struct{}
}

func (a *failingAcceptor) Accept() (net.Conn, uint32, error) {
	if a.calls++; a.calls <= a.fails {
		return nil, 0, os.NewSyscallError("accept4", syscall.EMFILE)
	}
	close(a.failed)
	<-a.ctx.Done()
	return nil, 0, net.ErrClosed
}

// TestServeBacksOffOnAcceptErrors: out of descriptors, the socket's accept
// loop waits between attempts (5ms doubling to 1s, on synctest's clock)
// and logs the run of errors once, instead of spinning and logging each.
func TestServeBacksOffOnAcceptErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		d := &Daemon{log: zap.New(core)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ln := &failingAcceptor{ctx: ctx, fails: 12, failed: make(chan struct{})}
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- d.serve(ctx, ln) }()
		<-ln.failed
		// 5+10+...+640ms, then 1s for each failure after the eighth.
		if waited, want := time.Since(start), 1275*time.Millisecond+4*time.Second; waited != want {
			t.Errorf("12 accept failures waited %v in all; want %v", waited, want)
		}
		if n := logs.Len(); n != 1 {
			t.Errorf("12 accept failures logged %d lines, want 1: %v", n, logs.All())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
