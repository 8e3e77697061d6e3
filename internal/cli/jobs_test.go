package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestJobsTable(t *testing.T) {
	failed := endedJob("old", api.JobFailed, api.Exit{Code: intp(3)})
	failed.Reason = "exit 3"
	undeclared := queuedJob("big")
	undeclared.VRAM, undeclared.Reason, undeclared.Priority = api.VRAM{}, "", -2
	jobs := []api.Job{job("train"), queuedJob("eval"), undeclared, failed}
	d := newFakeDaemon(t, map[string]handler{api.MethodJobs: answer(result(api.JobsResult{Jobs: jobs}))})
	out, errOut, code := ctl(t, d, "jobs", "--all", "--user", "alice")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"NAME   ID       STATE    PRIO  VRAM      GPUS  ATTEMPTS  AGE  REASON\n" +
		"train  j-train  running  5     21.6 GiB  2     2         3h   -\n" +
		"eval   j-eval   queued   0     auto      1     0         45s  waiting for 1 GPU with 18.0 GiB free\n" +
		"big    j-big    queued   -2    whole     1     0         45s  -\n" +
		"old    j-old    failed   5     21.6 GiB  2     2         3h   exit 3\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if got, want := string(d.only(t).Params), `{"all":true,"user":"alice"}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
}

func TestJobsParams(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"jobs"}, `{"recent":"10m0s"}`},
		{[]string{"jobs", "--recent", "1h"}, `{"recent":"1h0m0s"}`},
		{[]string{"jobs", "--recent", "0"}, `{}`},
		{[]string{"jobs", "--all"}, `{"all":true}`},
		{[]string{"jobs", "--state", "queued"}, `{"state":"queued"}`},
		{[]string{"jobs", "--state", "done"}, `{"state":"done","all":true}`},
		{[]string{"jobs", "--state", "finished"}, `{"states":["finished"]}`},
		{[]string{"jobs", "--state", "done,failed", "--state", "queued"}, `{"states":["done","failed","queued"]}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodJobs: answer(result(api.JobsResult{Jobs: []api.Job{}}))})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" || out != "NAME  ID  STATE  PRIO  VRAM  GPUS  ATTEMPTS  AGE  REASON\n" {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			if got := string(d.only(t).Params); got != tt.want {
				t.Errorf("params %s, want %s", got, tt.want)
			}
		})
	}
}

func TestJobDetails(t *testing.T) {
	running := job("train")
	first, second := running.Attempts[0].StartedAt, running.Attempts[1].StartedAt
	done := endedJob("train", api.JobDone, api.Exit{Code: intp(0)})
	undeclared := endedJob("whole", api.JobFailed, api.Exit{Signal: "SIGKILL"})
	undeclared.VRAM, undeclared.VRAMMiB, undeclared.Verdict = api.VRAM{}, 0, ""
	undeclared.Attempts = undeclared.Attempts[1:]
	undeclared.Attempts[0].N, undeclared.Attempts[0].VRAMMiB, undeclared.Attempts[0].GPUs = 1, 0, []string{"GPU-aaaa"}
	tests := []struct {
		j    api.Job
		want []string
	}{
		{running, []string{
			"name:         train\n",
			"id:           j-train\n",
			"state:        running\n",
			"user:         alice (uid 1000)\n",
			"cmd:          /bin/sh -c 'python train.py --lr 3e-4'\n",
			"dir:          /home/alice/exp\n",
			"vram:         21.6 GiB per GPU (submitted 18G)\n",
			"gpus:         2\n",
			"priority:     5\n",
			"preemptible:  yes\n",
			"retries:      1 of 2 left\n",
			"timeout:      2h\n",
			" (3h ago)\nstarted:      ",
			" (1h30m ago)\nprocess:      train\n",
			"peak:         0: 20.0 GiB, 1: 18.0 GiB\n",
			"\nATTEMPT  GPUS  VRAM      STARTED              DURATION  EXIT    PEAK                      OUTCOME\n",
			"1        0,1   18.0 GiB  " + first.Local().Format("2006-01-02 15:04:05") +
				"  12m       exit 1  0: 18.0 GiB, 1: 18.0 GiB  oom\n",
			"2        0,1   21.6 GiB  " + second.Local().Format("2006-01-02 15:04:05") +
				"  1h30m     -       0: 20.0 GiB, 1: 512 MiB   running, preempted 1x\n",
		}},
		{done, []string{
			"state:        done (exit 0)\n",
			" (1m ago)\nprocess:      train\n",
			"verdict:      declared 21.6 GiB, peak 20.0 GiB: fits\n",
			"1h29m     exit 0  0: 20.0 GiB, 1: 512 MiB   done, preempted 1x\n",
		}},
		{undeclared, []string{
			"state:        failed (signal SIGKILL)\n",
			"vram:         whole GPUs (submitted undeclared)\n",
			"\n1        0     whole  ",
			"  signal SIGKILL  0: 20.0 GiB, 1: 512 MiB  failed, preempted 1x\n",
		}},
		{queuedJob("eval"), []string{
			"state:        queued: waiting for 1 GPU with 18.0 GiB free\n",
			"vram:         auto, not resolved yet (submitted auto)\n",
			"preemptible:  no\n",
			"timeout:      off\n",
			"peak:         -\n",
			"attempts:     none\n",
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.j.State), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(tt.j)), api.MethodGPUs: answer(result(twoGPUs))})
			out, errOut, code := ctl(t, d, "job", tt.j.Name)
			if code != 0 || errOut != "" {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if got, want := string(d.requests()[0].Params), `{"name":"`+tt.j.Name+`"}`; got != want {
				t.Errorf("params %s, want %s", got, want)
			}
		})
	}
}

// twoGPUs are the GPUs of the canned jobs' attempts.
var twoGPUs = api.GPUsResult{GPUs: []api.GPU{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}}}

// TestJobWide: the attempts name GPUs by index (one line, not 150
// columns of UUIDs); --wide names them by UUID and asks nothing more.
func TestJobWide(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(job("train")))})
	out, errOut, code := ctl(t, d, "job", "train", "--wide")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"peak:         GPU-aaaa: 20.0 GiB, GPU-bbbb: 18.0 GiB\n",
		"GPU-aaaa,GPU-bbbb  18.0 GiB", "exit 1  GPU-aaaa: 18.0 GiB, GPU-bbbb: 18.0 GiB  oom\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	d.only(t)
	// A GPU the daemon no longer lists keeps its UUID, after the indexed ones.
	gone := api.GPUsResult{GPUs: twoGPUs.GPUs[1:]}
	d = newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(job("train"))), api.MethodGPUs: answer(result(gone))})
	if out, _, _ := ctl(t, d, "job", "train"); !strings.Contains(out, "peak:         1: 18.0 GiB, GPU-aaaa: 20.0 GiB\n") {
		t.Errorf("a GPU gone:\n%s", out)
	}
}

func TestJobNamedLikeASubcommand(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(queuedJob("wait"))), api.MethodGPUs: answer(result(twoGPUs))})
	if _, errOut, code := ctl(t, d, "job", "--", "wait"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if got := string(d.requests()[0].Params); got != `{"name":"wait"}` {
		t.Errorf("params %s, want the job named wait", got)
	}
}

func TestCancel(t *testing.T) {
	cancelled := endedJob("train", api.JobCancelled, api.Exit{Signal: "SIGTERM"})
	cancelled.Verdict = ""
	for _, args := range [][]string{{"cancel", "train"}, {"job", "cancel", "train"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodCancel: answer(result(cancelled))})
			out, errOut, code := ctl(t, d, args...)
			if code != 0 || errOut != "" || out != "train: cancelled (signal SIGTERM)\n" {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			req := d.only(t)
			if req.Method != api.MethodCancel || string(req.Params) != `{"name":"train"}` {
				t.Errorf("request %s %s, want cancel {\"name\":\"train\"}", req.Method, req.Params)
			}
		})
	}
}

func TestJobLogs(t *testing.T) {
	j := job("train")
	j.Process = "train-proc"
	tests := []struct {
		args   []string
		logs   handler
		out    string
		params string
	}{
		{[]string{"job", "logs", "train", "-n", "2"}, answer(result(api.LogsResult{Name: "train-proc", Lines: []string{"epoch 1", "epoch 2"}})),
			"epoch 1\nepoch 2\n", `{"name":"train-proc","lines":2}`},
		{[]string{"job", "logs", "-f", "train"}, followed, "loss 0.9\nloss 0.1\n", `{"name":"train-proc","lines":100,"follow":true}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(j)), api.MethodLogs: tt.logs})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" || out != tt.out {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			reqs := d.requests()
			if len(reqs) != 2 || reqs[0].Method != api.MethodJob || string(reqs[0].Params) != `{"name":"train"}` ||
				reqs[1].Method != api.MethodLogs || string(reqs[1].Params) != tt.params {
				t.Errorf("requests %+v, want job train, then logs %s", reqs, tt.params)
			}
		})
	}
}

func TestJobLogsBeforeItStarts(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(queuedJob("eval")))})
	out, errOut, code := ctl(t, d, "job", "logs", "eval")
	want := `gpuschedctl: job "eval" has no output yet: queued: waiting for 1 GPU with 18.0 GiB free` + "\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if reqs := d.requests(); len(reqs) != 1 {
		t.Errorf("requests %+v, want only the job lookup", reqs)
	}
}

// jobEvents are what job_wait streams for train: queued, running, a
// warning, then its end.
func jobEvents(end api.Job) []any {
	queued, running := queuedJob("train"), job("train")
	running.Attempts = running.Attempts[:1]
	running.Attempts[0].EndedAt, running.Attempts[0].Exit, running.Attempts[0].Outcome = time.Time{}, nil, ""
	return []any{
		event(api.Event{Time: evTime, Type: api.EventJob, Name: "train", JobState: api.JobQueued, Job: &queued}),
		event(api.Event{Time: evTime, Type: api.EventJob, Name: "train", JobState: api.JobRunning, Job: &running}),
		event(api.Event{Time: evTime, Type: api.EventJob, Name: "train", Warning: "uses 19.0 GiB on GPU-aaaa, declared 18.0 GiB"}),
		event(api.Event{Time: evTime, Type: api.EventJob, Name: "train", JobState: end.State, Job: &end}),
	}
}

func TestJobWait(t *testing.T) {
	done := endedJob("train", api.JobDone, api.Exit{Code: intp(0)})
	failed := endedJob("train", api.JobFailed, api.Exit{Code: intp(3)})
	failed.Reason, failed.Verdict = "exit 3", ""
	events := "" +
		stamp + "  train             queued: waiting for 1 GPU with 18.0 GiB free\n" +
		stamp + "  train             running (attempt 1)\n" +
		stamp + "  train             warning: uses 19.0 GiB on GPU-aaaa, declared 18.0 GiB\n"
	tests := []struct {
		name string
		end  api.Job
		out  string
		code int
	}{
		{"done", done, events + stamp + "  train             done\n" +
			"train: done (exit 0); declared 21.6 GiB, peak 20.0 GiB: fits\n", 0},
		{"failed", failed, events + stamp + "  train             failed: exit 3\n" +
			"train: failed (exit 3): exit 3\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodJobWait: answer(append(jobEvents(tt.end), result(tt.end))...)})
			out, errOut, code := ctl(t, d, "job", "wait", "train", "--timeout", "90s")
			if code != tt.code || errOut != "" || out != tt.out {
				t.Errorf("code %d, stderr %q, stdout\n%s\nwant %d and\n%s", code, errOut, out, tt.code, tt.out)
			}
			if got, want := string(d.only(t).Params), `{"name":"train","timeout":"1m30s"}`; got != want {
				t.Errorf("params %s, want %s", got, want)
			}
		})
	}
}

func TestJobWaitFails(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodJobWait: answer(failure(api.CodeTimeout, `job "train" still running after 1s`))})
	out, errOut, code := ctl(t, d, "job", "wait", "train")
	if code != 1 || out != "" || errOut != `gpuschedctl: job "train" still running after 1s (timeout)`+"\n" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := string(d.only(t).Params); got != `{"name":"train"}` {
		t.Errorf("params %s", got)
	}
}

func TestJobWaitJSON(t *testing.T) {
	cancelled := endedJob("train", api.JobCancelled, api.Exit{Signal: "SIGTERM"})
	lines := append(jobEvents(cancelled), result(cancelled))
	d := newFakeDaemon(t, map[string]handler{api.MethodJobWait: answer(lines...)})
	out, errOut, code := ctl(t, d, "--json", "job", "wait", "train")
	if code != 1 || errOut != "" {
		t.Fatalf("code %d, stderr %q; want 1 for a cancelled job", code, errOut)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(lines) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(lines), out)
	}
	for i, l := range lines[:len(lines)-1] {
		want, _ := json.Marshal(l.(api.StreamLine).Event)
		if !sameJSON(t, []byte(got[i]), want) {
			t.Errorf("line %d: %s, want %s", i, got[i], want)
		}
	}
	if want := result(cancelled).Result; !sameJSON(t, []byte(got[len(got)-1]), want) {
		t.Errorf("last line %s, want the job %s", got[len(got)-1], want)
	}
}

func TestJobsBadState(t *testing.T) {
	d := newFakeDaemon(t, nil)
	_, errOut, code := ctl(t, d, "jobs", "--state", "done,finshed")
	if code != exitUsage || !strings.Contains(errOut, `bad --state "finshed"`) {
		t.Errorf("code %d, stderr %q; want a usage error naming finshed", code, errOut)
	}
	if n := len(d.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestJobsPrune(t *testing.T) {
	done := endedJob("old", api.JobDone, api.Exit{Code: intp(0)})
	d := newFakeDaemon(t, map[string]handler{api.MethodPruneJobs: answer(result(api.JobsResult{Jobs: []api.Job{done}}))})
	out, errOut, code := ctl(t, d, "jobs", "prune", "--user", "alice")
	if code != 0 || errOut != "" || out != "removed old (j-old, done)\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	if got, want := string(d.only(t).Params), `{"user":"alice"}`; got != want {
		t.Errorf("params %s, want %s", got, want)
	}
}
