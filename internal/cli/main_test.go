package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestCallErrorIsOneLineWithoutUsage(t *testing.T) {
	tests := []struct {
		name   string
		method string
		resp   api.Response
		args   []string
		want   string
	}{
		{"not found", api.MethodStatus, failure(api.CodeNotFound, `process "x" not found`),
			[]string{"status", "x"}, `gpuschedctl: process "x" not found (not_found)` + "\n"},
		{"conflict", api.MethodRm, failure(api.CodeConflict, `process "x" is running; kill it first`),
			[]string{"rm", "x"}, `gpuschedctl: process "x" is running; kill it first (conflict)` + "\n"},
		{"permission", api.MethodKill, failure(api.CodePermissionDenied, `process "x" belongs to bob`),
			[]string{"kill", "x"}, `gpuschedctl: process "x" belongs to bob (permission_denied)` + "\n"},
		{"no code", api.MethodPS, api.Response{Error: "boom"},
			[]string{"ps"}, "gpuschedctl: boom\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{tt.method: answer(tt.resp)})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 1 || out != "" || errOut != tt.want {
				t.Errorf("code %d, stdout %q, stderr %q; want 1, \"\", %q", code, out, errOut, tt.want)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"ps", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"--json", "gpus", "extra"}, "unexpected arguments: extra"},
		{[]string{}, "missing command"},
		{[]string{"run", "x", "sleep", "1"}, "put the command after --"},
		{[]string{"run", "--", "sleep"}, "missing process NAME before --"},
		{[]string{"run", "x", "y", "--", "sleep"}, "unexpected arguments before --: y"},
		{[]string{"run", "x", "--"}, "missing command after --"},
		{[]string{"run", "x", "--env", "NOEQUALS", "--", "true"}, `bad --env "NOEQUALS": want KEY=VALUE`},
		{[]string{"run", "x", "--gpu", "-1", "--", "true"}, `bad --gpu "-1": GPU index -1 is negative`},
		{[]string{"kill"}, "missing process NAME"},
		{[]string{"status", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"logs", "x", "-n", "many"}, `invalid argument "many" for "-n, --lines"`},
		{[]string{"wait", "x", "--timeout", "soon"}, `invalid argument "soon" for "--timeout"`},
		// The disk tier's commands.
		{[]string{"hibernate"}, "missing process NAME"},
		{[]string{"hibernate", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"hibernate", "a", "--lock-timeout", "soon"}, `invalid argument "soon" for "--lock-timeout"`},
		{[]string{"hibernate", "a", "--lock-timeout", "-1s"}, "--lock-timeout must not be negative"},
		{[]string{"fork", "a"}, "fork needs --copies N, 1 or more"},
		{[]string{"fork", "a", "--copies", "0"}, "fork needs --copies N, 1 or more"},
		{[]string{"fork", "a", "--copies", "-2"}, "fork needs --copies N, 1 or more"},
		{[]string{"fork", "a", "--copies", "two"}, `invalid argument "two" for "--copies"`},
		{[]string{"fork", "a", "--copies", "2", "--gpus", "0"}, "--gpus names 1 GPU for 2 copies: give one per copy"},
		{[]string{"fork", "a", "--copies", "1", "--gpus", "-1"}, `bad --gpu "-1": GPU index -1 is negative`},
		{[]string{"fork", "a", "--copies", "1", "--timeout", "1x"}, `invalid argument "1x" for "--timeout"`},
		{[]string{"fork", "--copies", "1"}, "missing process NAME"},
		{[]string{"snapshots", "extra"}, "unexpected arguments: extra"},
		{[]string{"snapshot", "rm"}, "missing snapshot ID"},
		{[]string{"snapshot", "rm", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"set", "a"}, "nothing to set: give --priority, --pin, --no-pin, --ttl or --idle"},
		{[]string{"set", "a", "--pin", "--no-pin"}, "give --pin or --no-pin, not both"},
		{[]string{"set", "a", "--ttl", "soon"}, `invalid argument "soon" for "--ttl"`},
		{[]string{"set", "a", "--idle", "-5m"}, "--idle must not be negative"},
		{[]string{"set", "a", "--priority", "high"}, `invalid argument "high" for "--priority"`},
		{[]string{"set", "--ttl", "1m"}, "missing process NAME"},
		{[]string{"run", "x", "--ttl", "-1m", "--", "true"}, "--ttl must not be negative"},
		{[]string{"run", "x", "--idle", "later", "--", "true"}, `invalid argument "later" for "--idle"`},
		{[]string{"run", "x", "--no-pin", "--", "true"}, "unknown flag: --no-pin"},
		// The queue's and the leases' commands.
		{[]string{"submit"}, "nothing to submit: give -- CMD [ARGS...], --file FILE or --csv FILE"},
		{[]string{"submit", "python", "train.py"}, "put the command after --: submit [flags] -- CMD [ARGS...]"},
		{[]string{"submit", "x", "--", "true"}, "unexpected arguments before --: x"},
		{[]string{"submit", "--"}, "missing command after --"},
		{[]string{"submit", "--file", "a", "--", "true"}, "give only one of -- CMD, --file and --csv"},
		{[]string{"submit", "--file", "a", "--csv", "b"}, "give only one of -- CMD, --file and --csv"},
		{[]string{"submit", "--name", "x", "--csv", "b"}, "--name names the job of a command after --; name a jobs file's lines with [name=NAME]"},
		{[]string{"submit", "--name", "a/b", "--", "true"}, `bad --name: name "a/b": only letters, digits, '.', '_' and '-' are allowed`},
		{[]string{"submit", "--vram", "18X", "--", "true"}, `--vram: size "18X": unknown unit "x" (want M, G or T) (or "auto")`},
		{[]string{"submit", "--vram", "0", "--", "true"}, `--vram "0": must be more than 0 (leave it out for undeclared)`},
		{[]string{"submit", "--gpus", "0", "--", "true"}, "--gpus must be 1 or more"},
		{[]string{"submit", "--retries", "-1", "--", "true"}, "--retries must not be negative"},
		{[]string{"submit", "--timeout", "-1h", "--", "true"}, "--timeout must not be negative"},
		{[]string{"submit", "--timeout", "2", "--", "true"}, `invalid argument "2" for "--timeout"`},
		{[]string{"submit", "--env", "NOEQUALS", "--", "true"}, `bad --env "NOEQUALS": want KEY=VALUE`},
		{[]string{"submit", "--priority", "high", "--", "true"}, `invalid argument "high" for "--priority"`},
		{[]string{"jobs", "x"}, "unexpected arguments: x"},
		{[]string{"jobs", "--state", "sleeping"}, `bad --state "sleeping": want one of queued, starting, running, preempted, done, failed, timed_out, cancelled, infeasible`},
		{[]string{"job"}, "missing job NAME"},
		{[]string{"job", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"job", "wait"}, "missing job NAME"},
		{[]string{"job", "wait", "a", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"job", "logs", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"job", "logs", "a", "-n", "many"}, `invalid argument "many" for "-n, --lines"`},
		{[]string{"job", "cancel"}, "missing job NAME"},
		{[]string{"cancel", "a", "b"}, "unexpected arguments after a: b"},
		{[]string{"acquire", "python"}, "put the command after --: acquire [flags] -- CMD [ARGS...]"},
		{[]string{"acquire", "x", "--", "true"}, "unexpected arguments before --: x"},
		{[]string{"acquire", "--"}, "missing command after --"},
		{[]string{"acquire", "--gpus", "0"}, "--gpus must be 1 or more"},
		{[]string{"acquire", "--min-free", "1.5G"}, `bad --min-free: size "1.5G" is not a whole number with an optional unit (M, G or T)`},
		{[]string{"acquire", "--min-free", "0G"}, "--min-free must be more than 0 (leave it out for whole GPUs)"},
		{[]string{"acquire", "--max-util", "0"}, "--max-util must be a percentage, 1-100"},
		{[]string{"acquire", "--max-util", "101"}, "--max-util must be a percentage, 1-100"},
		{[]string{"acquire", "--max-power", "-5"}, "--max-power must be a number of watts, more than 0"},
		{[]string{"acquire", "--max-power", "NaN"}, "--max-power must be a number of watts, more than 0"},
		{[]string{"acquire", "--gpu-ids", "0,-1"}, `bad --gpu "-1": GPU index -1 is negative`},
		{[]string{"acquire", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"leases", "x"}, "unexpected arguments: x"},
		{[]string{"release"}, "missing lease ID"},
		{[]string{"release", "a", "b"}, "unexpected arguments after a: b"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			checkUsageError(t, tt.args, tt.want)
		})
	}
}

func TestHelpGoesToStdout(t *testing.T) {
	out, errOut, code := ctl(t, nil, "wait", "--help")
	if code != 0 || errOut != "" || !strings.Contains(out, "Exit status: 0 when the process exited with code 0") {
		t.Errorf("code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

func TestDaemonNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	for _, args := range [][]string{{"ps"}, {"logs", "-f", "x"}, {"--json", "version"}} {
		out, errOut, code := ctl(t, nil, append([]string{"--socket", sock}, args...)...)
		want := "gpuschedctl: no daemon socket at " + sock
		if code != 1 || out != "" || !strings.HasPrefix(errOut, want) ||
			!strings.Contains(errOut, "gpuschedd --socket "+sock) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestSocketFromEnvironment(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{}}))})
	t.Setenv(api.SocketEnv, d.path)
	if _, errOut, code := ctl(t, nil, "ps"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	d.only(t)
}

// checkUsageError runs gpuschedctl args against a fake daemon and checks a
// usage error: exit 2, nothing on stdout, "gpuschedctl: ...want" then the
// usage on stderr, and no call to the daemon.
func checkUsageError(t *testing.T, args []string, want string) {
	t.Helper()
	d := newFakeDaemon(t, nil)
	out, errOut, code := ctl(t, d, args...)
	first, rest, _ := strings.Cut(errOut, "\n")
	if code != 2 || out != "" {
		t.Errorf("code %d, stdout %q; want 2, nothing", code, out)
	}
	if !strings.HasPrefix(first, "gpuschedctl: ") || !strings.Contains(first, want) {
		t.Errorf("first stderr line %q, want gpuschedctl: ...%s", first, want)
	}
	if !strings.Contains(rest, "Usage:") {
		t.Errorf("no usage after a usage error:\n%s", errOut)
	}
	if reqs := d.requests(); len(reqs) > 0 {
		t.Errorf("usage error still called the daemon: %+v", reqs)
	}
}
