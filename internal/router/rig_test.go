package router_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// The end-to-end tier: a real gpuschedd on simulated GPUs, the real
// gpusched-router binary running as an unprivileged user made for the
// test, gpusched-simjob --http as the model servers, and real HTTP
// clients (curl, Python's urllib).

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

var (
	raceOnce sync.Once
	raceBin  string
	raceErr  error
)

// routerBinary is the router the tests run: the one testutil built, or
// under the race detector one built with it, so that the router's own
// races fail the tests too.
func routerBinary(t *testing.T, bins testutil.Binaries) string {
	t.Helper()
	if !raceEnabled {
		return bins.Router
	}
	raceOnce.Do(func() {
		root, err := testutil.ModuleRoot()
		if err != nil {
			raceErr = err
			return
		}
		raceBin = filepath.Join(bins.Dir, "gpusched-router-race")
		cmd := exec.Command("go", "build", "-race", "-o", raceBin, "./cmd/gpusched-router")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			raceErr = fmt.Errorf("go build -race: %v\n%s", err, out)
		}
	})
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	return raceBin
}

// rig is one machine: a daemon, a router user, and the router once started.
type rig struct {
	t            *testing.T
	bins         testutil.Binaries
	dir          string
	sock         string
	user         testutil.User
	stderr       *lockedBuffer // the daemon's
	router       *exec.Cmd
	rlog         *lockedBuffer // the router's
	url          string
	routerExited chan error
}

// newRig starts a daemon with the simulated GPUs sim ("1x24G") and extra flags.
func newRig(t *testing.T, sim string, extra ...string) *rig {
	t.Helper()
	testutil.RequiresRoot(t)
	g := &rig{t: t, bins: testutil.Build(t), dir: testutil.ShortDir(t), stderr: &lockedBuffer{}, rlog: &lockedBuffer{}}
	g.user = testutil.NewUser(t, "gsrouter", "gsroutertest")
	t.Cleanup(func() { // last: after the daemon has stopped
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", g.stderr.String())
			t.Logf("router log:\n%s", g.rlog.String())
		}
	})
	g.sock = testutil.StartSimDaemon(t, g.bins, g.dir, sim, g.user.Group, g.stderr, extra...).Socket
	t.Cleanup(g.stopRouter) // first: before the daemon stops
	return g
}

// simModel is a [models.NAME] table for gpusched-simjob --http holding
// vramMiB, plus extra TOML lines.
func (g *rig) simModel(name string, vramMiB int, extra ...string) string {
	return g.simModelArgs(name, vramMiB, nil, extra...)
}

// simModelArgs is simModel with more simjob flags.
func (g *rig) simModelArgs(name string, vramMiB int, flags []string, extra ...string) string {
	argv := []string{g.bins.SimJob, "--http", "${PORT}", "--vram", fmt.Sprint(vramMiB), "--model", name}
	quoted := make([]string, 0, len(argv)+len(flags))
	for _, a := range append(argv, flags...) {
		quoted = append(quoted, strconv.Quote(a))
	}
	return fmt.Sprintf("[models.%s]\ncmd = [%s]\nport = %d\nvram = \"%dM\"\n%s\n",
		name, strings.Join(quoted, ", "), testutil.FreePort(g.t), vramMiB, strings.Join(extra, "\n"))
}

// writeConfig writes the router's config where its user may read it.
func (g *rig) writeConfig(text string) string {
	g.t.Helper()
	path := filepath.Join(g.dir, fmt.Sprintf("router-%d.toml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return path
}

// routerCmd prepares gpusched-router as the rig's user.
func (g *rig) routerCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(routerBinary(g.t, g.bins), args...)
	cmd.Dir = g.dir
	// The models start with the router's environment. Go >= 1.24 listens
	// with MPTCP, whose sockets CRIU cannot dump ("inet: Unsupported proto
	// 262"): simjob's server must listen as llama-server and vLLM do, on TCP.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GPUSCHED_SOCKET=" + g.sock, "LANG=C", "GODEBUG=multipathtcp=0"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: g.user.UID, Gid: g.user.GID, Groups: g.user.Groups()}}
	return cmd
}

// startRouter runs the router on config text and waits until it serves.
func (g *rig) startRouter(text string) {
	g.t.Helper()
	port := testutil.FreePort(g.t)
	g.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	g.router = g.routerCmd("--config", g.writeConfig(text), "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	pr, pw := io.Pipe()
	g.router.Stderr = pw
	if err := g.router.Start(); err != nil {
		g.t.Fatal(err)
	}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			g.rlog.Write(append(sc.Bytes(), '\n'))
			if strings.Contains(sc.Text(), `"msg":"serving"`) {
				once.Do(func() { close(serving) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- g.router.Wait(); pw.Close() }()
	g.routerExited = exited
	select {
	case <-serving:
	case err := <-exited:
		g.router = nil
		g.t.Fatalf("router exited: %v\n%s", err, g.rlog.String())
	case <-time.After(30 * time.Second):
		g.t.Fatalf("router not serving after 30s:\n%s", g.rlog.String())
	}
}

func (g *rig) stopRouter() {
	if g.router == nil || g.router.Process == nil {
		return
	}
	g.router.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-g.routerExited:
	case <-time.After(40 * time.Second):
		g.router.Process.Kill()
		err = <-g.routerExited
	}
	g.router = nil
	if err != nil || strings.Contains(g.rlog.String(), "DATA RACE") {
		g.t.Errorf("router exit: %v (a race or a failed shutdown)", err)
	}
}

// client is a root connection to the daemon, closed with the test.
func (g *rig) client() *api.Client {
	g.t.Helper()
	c, err := api.Dial(context.Background(), g.sock)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	return c
}

func (g *rig) process(name string) *api.Process {
	g.t.Helper()
	p, err := g.client().Process(context.Background(), name)
	if err != nil {
		g.t.Fatalf("status %s: %v", name, err)
	}
	return p
}

// awaitState waits, on the daemon's event stream, until name is in state.
func (g *rig) awaitState(name string, state api.State, timeout time.Duration) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := api.Dial(ctx, g.sock)
	if err != nil {
		g.t.Fatal(err)
	}
	defer c.Close()
	errDone := fmt.Errorf("done")
	err = c.Events(ctx, api.EventsParams{}, func(e *api.Event) error {
		if e.Type == api.EventSubscribed {
			if p, err := g.clientQuiet(name); err == nil && p.State == state {
				return errDone
			}
		}
		if e.Type == api.EventProcess && e.Name == name && e.State == state {
			return errDone
		}
		return nil
	})
	if err != errDone {
		g.t.Fatalf("%s not %s within %v: %v (now %s)", name, state, timeout, err, g.process(name).State)
	}
}

func (g *rig) clientQuiet(name string) (*api.Process, error) {
	c, err := api.Dial(context.Background(), g.sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Process(context.Background(), name)
}

// otherUser is a second unprivileged user of the daemon.
func (g *rig) otherUser() testutil.User {
	return testutil.NewUser(g.t, "gsrouter2", g.user.Group)
}

// runAs starts a simulated job of user u (as root may) holding vramMiB
// and waits until the daemon sees all of it: the job allocates in steps,
// and GPU memory is sampled, so there is no event to wait for.
func (g *rig) runAs(u testutil.User, name string, vramMiB int) {
	g.t.Helper()
	cmd := []string{g.bins.SimJob, "--vram", fmt.Sprint(vramMiB)}
	if _, err := g.client().Run(context.Background(), api.RunParams{Name: name, Cmd: cmd, Dir: "/", User: u.Name}); err != nil {
		g.t.Fatalf("run %s as %s: %v", name, u.Name, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p := g.process(name); p.State == api.StateRunning && p.VRAMMiB >= uint64(vramMiB) {
			return
		} else if time.Now().After(deadline) {
			g.t.Fatalf("%s is %s holding %d of %d MiB after 20s", name, p.State, p.VRAMMiB, vramMiB)
		}
	}
}

// ctlAsUser runs gpuschedctl as the router's user and returns its output.
func (g *rig) ctlAsUser(args ...string) string {
	g.t.Helper()
	cmd := exec.Command(g.bins.Ctl, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GPUSCHED_SOCKET=" + g.sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: g.user.UID, Gid: g.user.GID, Groups: g.user.Groups()}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("gpuschedctl %v as %s: %v\n%s", args, g.user.Name, err, out)
	}
	return string(out)
}

// curl runs curl and returns its stdout and its exit status.
func curl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "60"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// chat posts a chat completion for model through curl and returns the
// HTTP status and body.
func (g *rig) chat(model string, extraArgs ...string) (int, string) {
	g.t.Helper()
	return g.chatSaying(model, "hi", extraArgs...)
}

// chatSaying is chat with the user's message.
func (g *rig) chatSaying(model, content string, extraArgs ...string) (int, string) {
	g.t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, content)
	out, code := curl(g.t, append([]string{"-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d", body, g.url + "/v1/chat/completions"}, extraArgs...)...)
	if code != 0 {
		g.t.Fatalf("curl exit %d: %s", code, out)
	}
	i := strings.LastIndexByte(out, '\n')
	status, _ := strconv.Atoi(out[i+1:])
	return status, out[:i]
}

// chatAsUser, run as a local user, posts a chat completion for model
// argv[2] to the router at argv[1], waiting at most argv[3] seconds, and
// prints the answer's status, with its body where it is an error.
const chatAsUser = `
import json, sys, urllib.request, urllib.error
body = json.dumps({"model": sys.argv[2], "messages": [{"role": "user", "content": "hi"}]}).encode()
try:
    print(urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}), timeout=float(sys.argv[3])).status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`

// chatAs asks for a chat completion of model as u, and returns what
// chatAsUser printed: "200", or the error's status and body.
func (g *rig) chatAs(u testutil.User, model string, timeout time.Duration) (string, error) {
	return testutil.PythonOutputAs(u, chatAsUser, g.url, model, fmt.Sprint(timeout.Seconds()))
}

// python runs a Python program with the router's URL as argv[1] and
// returns its stdout.
func (g *rig) python(program string) string {
	g.t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("python3", "-c", program, g.url)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		g.t.Fatalf("python: %v\n%s%s", err, out.String(), errb.String())
	}
	return out.String()
}

// metric is the value of one series line of /metrics ("" when absent).
func (g *rig) metric(series string) string {
	g.t.Helper()
	out, _ := curl(g.t, g.url+"/metrics")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return strings.TrimPrefix(l, series+" ")
		}
	}
	return ""
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
