package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestJSONPrintsTheResult checks that --json prints exactly the daemon's
// result, as one compact line.
func TestJSONPrintsTheResult(t *testing.T) {
	gone := exited("old", api.Exit{Code: intp(0)})
	tests := []struct {
		method string
		args   []string
		res    any
	}{
		{api.MethodPS, []string{"ps"}, api.PSResult{Processes: []api.Process{proc("a"), gone}}},
		{api.MethodStatus, []string{"status"}, api.Status{Version: "1.0", Protocol: 1, Backend: "sim",
			States: map[api.State]int{api.StateRunning: 1}, GPUs: []api.GPUSummary{}}},
		{api.MethodStatus, []string{"status", "a"}, proc("a")},
		{api.MethodGPUs, []string{"gpus"}, api.GPUsResult{GPUs: []api.GPU{{Index: 0, UUID: "GPU-aaaa", Processes: []api.GPUProcess{}}}}},
		{api.MethodRun, []string{"run", "a", "--", "true"}, proc("a")},
		{api.MethodKill, []string{"kill", "old"}, gone},
		{api.MethodRm, []string{"rm", "old"}, gone},
		{api.MethodWait, []string{"wait", "old"}, gone},
		{api.MethodLogs, []string{"logs", "a"}, api.LogsResult{Name: "a", Lines: []string{"x", "y"}}},
		{api.MethodSubmit, []string{"submit", "--", "true"}, api.SubmitResult{Jobs: []api.Job{queuedJob("a")}}},
		{api.MethodJobs, []string{"jobs"}, api.JobsResult{Jobs: []api.Job{job("a"), queuedJob("b")}}},
		{api.MethodJob, []string{"job", "a"}, job("a")},
		{api.MethodJobWait, []string{"job", "wait", "a"}, endedJob("a", api.JobDone, api.Exit{Code: intp(0)})},
		{api.MethodCancel, []string{"cancel", "a"}, endedJob("a", api.JobCancelled, api.Exit{Signal: "SIGTERM"})},
		{api.MethodCancel, []string{"job", "cancel", "a"}, queuedJob("a")},
		{api.MethodLeases, []string{"leases"}, api.LeasesResult{Leases: []api.Lease{lease("L1")}}},
		{api.MethodRelease, []string{"release", "L1"}, lease("L1")},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			want := result(tt.res).Result
			d := newFakeDaemon(t, map[string]handler{tt.method: answer(result(tt.res))})
			out, errOut, code := ctl(t, d, append([]string{"--json"}, tt.args...)...)
			if code != 0 || errOut != "" {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Errorf("want one JSON line, got %q", out)
			}
			if !sameJSON(t, []byte(out), want) {
				t.Errorf("stdout %s\nwant   %s", out, want)
			}
		})
	}
}
