package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

var hello = api.Hello{
	Protocol: api.ProtocolVersion, Version: "0.3.0", Backend: "sim",
	Capabilities: []string{api.CapRun, api.CapLogs},
	Caller:       api.Identity{UID: 1000, GID: 1000, Groups: []uint32{1000}, User: "alice"},
}

func TestVersion(t *testing.T) {
	old := Version
	Version = "1.2.3"
	t.Cleanup(func() { Version = old })
	d := newFakeDaemon(t, map[string]handler{api.MethodHello: answer(result(hello))})

	out, errOut, code := ctl(t, d, "version")
	want := "" +
		"client:        1.2.3 (protocol 1)\n" +
		"daemon:        0.3.0 (protocol 1)\n" +
		"backend:       sim\n" +
		"capabilities:  run, logs.follow\n" +
		"caller:        alice (uid 1000, gid 1000)\n"
	if code != 0 || errOut != "" || out != want {
		t.Errorf("code %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}

	out, _, _ = ctl(t, d, "--json", "version")
	if !sameJSON(t, []byte(out), []byte(`{"client":"1.2.3","daemon":`+string(result(hello).Result)+`}`)) {
		t.Errorf("--json: %s", out)
	}
}

func TestVersionWithoutDaemonStillShowsTheClient(t *testing.T) {
	out, errOut, code := ctl(t, nil, "--socket", t.TempDir()+"/none", "version")
	if code != 1 || out != "client:  dev (protocol 1)\n" || !strings.Contains(errOut, "not running") {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestVersionFlag: gpuschedctl --version prints its own version and the
// daemon's when it answers, and still succeeds when it does not.
func TestVersionFlag(t *testing.T) {
	old := Version
	Version = "1.2.3"
	t.Cleanup(func() { Version = old })
	d := newFakeDaemon(t, map[string]handler{api.MethodHello: answer(result(hello))})
	out, errOut, code := ctl(t, d, "--version")
	if want := "gpuschedctl 1.2.3 (protocol 1)\ngpuschedd 0.3.0 (protocol 1) at " + d.path + "\n"; code != 0 || errOut != "" || out != want {
		t.Errorf("exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	out, _, _ = ctl(t, d, "--json", "--version")
	if !sameJSON(t, []byte(out), []byte(`{"client":"1.2.3","daemon":`+string(result(hello).Result)+`}`)) {
		t.Errorf("--json: %s", out)
	}

	none := t.TempDir() + "/none"
	out, errOut, code = ctl(t, nil, "--socket", none, "--version")
	if want := "gpuschedctl 1.2.3 (protocol 1)\ngpuschedd: not reached (no daemon socket at " + none + ")\n"; code != 0 || errOut != "" || out != want {
		t.Errorf("no daemon: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	out, _, code = ctl(t, nil, "--socket", none, "--json", "--version")
	if code != 0 || !sameJSON(t, []byte(out), []byte(`{"client":"1.2.3","daemon":null,"error":"no daemon socket at `+none+`"}`)) {
		t.Errorf("no daemon, --json: exit %d, %s", code, out)
	}
}

func TestVersionShowsExcludedGPUs(t *testing.T) {
	h := hello
	h.ExcludedGPUs = []string{"GPU 1: MIG mode is on: ..."}
	d := newFakeDaemon(t, map[string]handler{api.MethodHello: answer(result(h))})
	out, _, code := ctl(t, d, "version")
	if code != 0 || !strings.Contains(out, "excluded:      GPU 1: MIG mode is on: ...\n") {
		t.Errorf("code %d, stdout\n%s", code, out)
	}
}
