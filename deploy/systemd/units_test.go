// Package systemd_test checks the shipped systemd units and `make install`.
package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// TestServiceKeepsWhatCRIUNeeds: no setting that gives the daemon (and so
// its managed processes) a mount namespace, filtered syscalls or forbidden
// PID namespaces; processes outlive the daemon, which the OOM killer
// weighs below them (each tree takes its caller's oom_score_adj).
func TestServiceKeepsWhatCRIUNeeds(t *testing.T) {
	s := testutil.UnitSettings(t, "gpuschedd.service")
	for _, forbidden := range []string{"PrivateTmp", "ProtectSystem", "ProtectHome", "ReadOnlyPaths", "InaccessiblePaths",
		"PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups", "RestrictNamespaces",
		"SystemCallFilter", "MountFlags", "PrivateMounts", "NoNewPrivileges", "TemporaryFileSystem", "BindPaths"} {
		if v, ok := s["Service."+forbidden]; ok {
			t.Errorf("gpuschedd.service sets %s=%q: it would put managed processes in a mount namespace or filter what CRIU needs", forbidden, v)
		}
	}
	for key, want := range map[string]string{"Service.Type": "notify", "Service.KillMode": "process", "Service.Restart": "on-failure",
		"Service.Delegate": "yes", "Service.StateDirectory": "gpusched", "Service.RuntimeDirectory": "gpusched", "Service.OOMScoreAdjust": "-900"} {
		if got := s[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("gpuschedd.service %s = %q, want %q", key, got, want)
		}
	}
	sock := testutil.UnitSettings(t, "gpuschedd.socket")
	for key, want := range map[string]string{"Socket.ListenStream": "/run/gpusched/gpusched.sock", "Socket.SocketMode": "0660", "Socket.SocketGroup": "gpusched"} {
		if got := sock[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("gpuschedd.socket %s = %q, want %q", key, got, want)
		}
	}
}

// TestRouterServiceRunsAsAUser: the router is an ordinary user in the
// socket's group, never root, listening on loopback, and may ask the
// kernel (sock_diag, a netlink socket) whose each client connection is.
func TestRouterServiceRunsAsAUser(t *testing.T) {
	s := testutil.UnitSettings(t, "gpusched-router.service")
	for key, want := range map[string]string{"Service.User": "gpusched-router", "Service.SupplementaryGroups": "gpusched",
		"Service.NoNewPrivileges": "yes", "Service.Restart": "on-failure", "Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK"} {
		if got := s[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("gpusched-router.service %s = %q, want %q", key, got, want)
		}
	}
	exec := s["Service.ExecStart"]
	if len(exec) != 1 || !strings.HasPrefix(exec[0], "/usr/local/bin/gpusched-router --config ") || !strings.Contains(exec[0], "--listen 127.0.0.1:") {
		t.Errorf("gpusched-router.service ExecStart = %q, want the router on loopback", exec)
	}
	users, err := os.ReadFile("gpusched.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"u gpusched-router ", "m gpusched-router gpusched"} {
		if !strings.Contains(string(users), "\n"+line) {
			t.Errorf("gpusched.sysusers has no %q line", line)
		}
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker on the units, with
// ExecStart pointing at a built daemon (the installed path does not exist here).
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	bins := testutil.Build(t)
	dir := t.TempDir()
	for _, name := range []string{"gpuschedd.service", "gpuschedd.socket", "gpusched-router.service"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), "/usr/local/bin/gpuschedd", bins.Daemon)
		text = strings.ReplaceAll(text, "/usr/local/bin/gpusched-router", bins.Router)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "gpuschedd.service"), filepath.Join(dir, "gpuschedd.socket"), filepath.Join(dir, "gpusched-router.service")).CombinedOutput()
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// systemd < 254 does not know DelegateSubgroup= and ignores it (docs/priority.md).
		if line != "" && !strings.Contains(line, "Unknown key 'DelegateSubgroup'") {
			problems = append(problems, line)
		}
	}
	if err != nil || len(problems) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, strings.Join(problems, "\n"))
	}
}

// TestMakeInstallAndUninstall stages an install under DESTDIR: every file in
// place with its mode, the unit naming the binary under PREFIX, working
// completions; then uninstall removes all of it.
func TestMakeInstallAndUninstall(t *testing.T) {
	bins := testutil.Build(t)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", "install.sh"), args...)
		cmd.Env = append(os.Environ(), "DESTDIR="+dest, "PREFIX=/opt/gs", "BIN="+bins.Dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh %s: %v\n%s", args[0], err, out)
		}
		return string(out)
	}
	run("install")
	files := strings.Fields(run("files"))
	if len(files) < 10 {
		t.Fatalf("install.sh files: %q", files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		want := os.FileMode(0o644)
		if strings.Contains(f, "/bin/") {
			want = 0o755
		}
		if fi.Mode().Perm() != want || fi.Size() == 0 {
			t.Errorf("%s: mode %v size %d, want %v and content", f, fi.Mode().Perm(), fi.Size(), want)
		}
	}
	svc := testutil.UnitSettings(t, filepath.Join(dest, "opt/gs/lib/systemd/system/gpuschedd.service"))
	if got := svc["Service.ExecStart"]; len(got) != 1 || !strings.HasPrefix(got[0], "/opt/gs/bin/gpuschedd ") {
		t.Errorf("installed unit's ExecStart = %q, want the binary under PREFIX", got)
	}
	bash, err := os.ReadFile(filepath.Join(dest, "opt/gs/share/bash-completion/completions/gpuschedctl"))
	if err != nil || !strings.Contains(string(bash), "__start_gpuschedctl") {
		t.Errorf("bash completion: %v", err)
	}

	run("uninstall")
	for _, f := range files {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("left behind by uninstall: %s", f)
		}
	}
}
