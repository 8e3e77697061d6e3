package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// metricsScrapeEnv makes the test binary a helper that scrapes a metrics
// port once as another user (see scrapeAs). Its value is "uid:gid:addr".
const metricsScrapeEnv = "GPUSCHED_TEST_METRICS_SCRAPE"

// scrapeGuard is how long a scrape in these tests may go unanswered before
// it counts as refused: a guard, far above a scrape's milliseconds.
const scrapeGuard = 20 * time.Second

func init() {
	if spec := os.Getenv(metricsScrapeEnv); spec != "" {
		if err := metricsScrapeHelper(spec); err != nil {
			fmt.Fprintln(os.Stderr, "metrics scrape helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// metricsScrapeHelper drops to the given uid and gid and scrapes addr once.
func metricsScrapeHelper(spec string) error {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("bad spec %q", spec)
	}
	uid, err1 := strconv.Atoi(parts[0])
	gid, err2 := strconv.Atoi(parts[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("bad spec %q: %w", spec, err)
	}
	// Go applies these to every thread of the process.
	if err := errors.Join(syscall.Setgroups(nil), syscall.Setgid(gid), syscall.Setuid(uid)); err != nil {
		return err
	}
	return scrapeWithin(parts[2], scrapeGuard)
}

// scrapeWithin GETs http://addr/metrics on a connection of its own and
// reads the whole answer, which must come within limit and be 200 OK.
func scrapeWithin(addr string, limit time.Duration) error {
	client := &http.Client{Timeout: limit, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape: %s", resp.Status)
	}
	return nil
}

// scrapeAs scrapes addr once as u, from a process of its own.
func scrapeAs(t *testing.T, u testutil.User, addr string) error {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d:%s", metricsScrapeEnv, u.UID, u.GID, addr))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, out.Bytes())
	}
	return nil
}

// establishedOf counts the TCP connections to addr that uid holds open and
// the daemon has not closed (ESTABLISHED in /proc/net/tcp: a connection
// the daemon closed is in CLOSE_WAIT on the user's side).
func establishedOf(t *testing.T, uid uint32, addr string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 7 && f[3] == "01" && f[7] == strconv.FormatUint(uint64(uid), 10) && procNetAddr(t, f[2]) == addr {
			n++
		}
	}
	return n
}

// TestRedteamMetricsPerUser: a local user outside the socket's group opens
// many times its share of metrics connections, all with a request they
// never read the answer of, and holds them: the daemon keeps only
// --max-metrics-conns-per-user of them and closes the rest at once, so
// that root's scrape and another user's are still answered while it holds
// its share.
func TestRedteamMetricsPerUser(t *testing.T) {
	const share, floodConns = 3, 4 * metricsMaxConns
	setMetricsTimeouts(t, time.Minute, time.Minute, time.Minute) // nothing of the flood times out while it is measured
	attacker := testutil.NewUser(t, "gsmsh1", "gsmshx")
	other := testutil.NewUser(t, "gsmsh2", "gsmshx")
	addr := testutil.FreeLoopback(t)
	newHarness(t, func(c *config.Config) { c.MetricsAddr = addr; c.Limits.MetricsConns = share })
	if err := scrapeWithin(addr, scrapeGuard); err != nil {
		t.Fatalf("scrape before the flood: %v", err)
	}

	startMetricsFlood(t, attacker, addr, floodConns, floodConns)
	// The flood's connections were all made before this one, so the daemon
	// has taken them all from its backlog when it answers.
	if err := scrapeWithin(addr, scrapeGuard); err != nil {
		t.Fatalf("root's scrape while %s floods the metrics port: %v", attacker.Name, err)
	}
	if err := scrapeAs(t, other, addr); err != nil {
		t.Fatalf("%s's scrape while %s floods the metrics port: %v", other.Name, attacker.Name, err)
	}
	// Polled: the kernel gives no event for a peer's close having arrived.
	for guard := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := establishedOf(t, attacker.UID, addr)
		if n == share {
			break
		}
		if n < share || time.Now().After(guard) {
			t.Fatalf("%s holds %d metrics connections the daemon has not closed; want its share, %d", attacker.Name, n, share)
		}
	}
}
