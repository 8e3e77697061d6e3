package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestRunMPSFlags: --mps-threads and --mps-mem-limit reach the request;
// bad values are refused before anything is sent.
func TestRunMPSFlags(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
	if _, errOut, code := ctl(t, d, "run", "train", "--mps-threads", "50", "--mps-mem-limit", "8G", "--", "true"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var p api.RunParams
	d.params(t, api.MethodRun, &p)
	if p.MPSThreads != 50 || p.MPSMemLimit != (api.VRAM{MiB: 8192}) {
		t.Errorf("mps threads %d, limit %+v; want 50 and 8G", p.MPSThreads, p.MPSMemLimit)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mps-threads", "101"}, "--mps-threads 101: want a percentage, 1..100"},
		{[]string{"--mps-threads", "-1"}, "--mps-threads -1: want a percentage, 1..100"},
		{[]string{"--mps-mem-limit", "lots"}, `bad --mps-mem-limit "lots"`},
		{[]string{"--mps-mem-limit", "0"}, `--mps-mem-limit "0": must be more than 0`},
	} {
		d := newFakeDaemon(t, nil)
		args := append(append([]string{"run", "train"}, tc.args...), "--", "true")
		if _, errOut, code := ctl(t, d, args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
		if n := len(d.requests()); n != 0 {
			t.Errorf("%v: %d requests sent", tc.args, n)
		}
	}
}

func TestSubmitAttributes(t *testing.T) {
	d := newFakeDaemon(t, submitted(job("train")))
	if _, errOut, code := ctl(t, d, "submit", "--clean-env", "--name", "train", "--vram", "4G", "--dir", "/srv",
		"--nice", "5", "--mps-threads", "50", "--mps-mem-limit", "3G", "--", "python", "train.py"); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := `{"name":"train","cmd":["python","train.py"],"dir":"/srv","vram":4096,"gpus":1,"nice":5,` +
		`"mps_threads":50,"mps_mem_limit":3072}`
	if got := string(d.only(t).Params); got != want {
		t.Errorf("params %s\nwant   %s", got, want)
	}

	// A jobs file's options replace the flags for their line.
	path := writeFile(t, "jobs.txt", "[nice=-3 mps_threads=25 mps_mem_limit=2G] a\nb\n")
	d = newFakeDaemon(t, submitted(job("a"), job("b")))
	if _, errOut, code := ctl(t, d, "submit", "--clean-env", "--dir", "/srv", "--nice", "2", "--mps-threads", "10", "--file", path); code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var p api.SubmitParams
	d.params(t, api.MethodSubmit, &p)
	if len(p.Jobs) != 2 {
		t.Fatalf("jobs %+v", p.Jobs)
	}
	a, b := p.Jobs[0], p.Jobs[1]
	if a.Nice != -3 || a.MPSThreads != 25 || a.MPSMemLimit.MiB != 2048 || b.Nice != 2 || b.MPSThreads != 10 || b.MPSMemLimit.MiB != 0 {
		t.Errorf("jobs %+v", p.Jobs)
	}
}

func TestParseJobsFileAttributes(t *testing.T) {
	got, err := parseJobsFile(strings.NewReader("[nice=19 mps_threads=100 mps_mem_limit=512M] run\n[nice=-20 mps_threads=1] x\n"), "jobs.txt", jobDefaults)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.JobSpec{
		shell("run", func(s *api.JobSpec) { s.Nice, s.MPSThreads, s.MPSMemLimit = 19, 100, api.VRAM{MiB: 512} }),
		shell("x", func(s *api.JobSpec) { s.Nice, s.MPSThreads = -20, 1 }),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	_, err = parseJobsFile(strings.NewReader("[nice=20] a\n[nice=x] b\n[mps_threads=0] c\n[mps_threads=101] d\n[mps_mem_limit=0] e\n[mps_mem_limit=big] f\n[mps_threads] g\n"), "jobs.txt", jobDefaults)
	wantErr := "jobs.txt: 7 problems, nothing submitted:\n" +
		`jobs.txt:1: nice "20": want a whole number, -20..19` + "\n" +
		`jobs.txt:2: nice "x": want a whole number, -20..19` + "\n" +
		`jobs.txt:3: mps_threads "0": want a percentage, 1..100` + "\n" +
		`jobs.txt:4: mps_threads "101": want a percentage, 1..100` + "\n" +
		`jobs.txt:5: mps_mem_limit "0": must be more than 0` + "\n" +
		`jobs.txt:6: mps_mem_limit: size "big": `
	if err == nil || !strings.HasPrefix(err.Error(), wantErr) || !strings.Contains(err.Error(), `jobs.txt:7: option "mps_threads" needs a value: mps_threads=PERCENT`) {
		t.Errorf("error\n%v\nwant it to start with\n%s", err, wantErr)
	}
}

func TestShowAttributes(t *testing.T) {
	j := job("train")
	j.Nice, j.MPSThreads, j.MPSMemLimit = 5, 50, 4096
	d := newFakeDaemon(t, map[string]handler{api.MethodJob: answer(result(j)), api.MethodGPUs: answer(result(twoGPUs))})
	out, _, code := ctl(t, d, "job", "train")
	if code != 0 || !strings.Contains(out, "nice:         5 (low priority)\n") ||
		!strings.Contains(out, "mps:          50% of each GPU's threads, memory limit 4.0 GiB per GPU\n") {
		t.Errorf("job output:\n%s", out)
	}
	p := proc("train")
	p.Nice, p.MPSMemLimit = -2, 1024
	d = newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(p))})
	out, _, code = ctl(t, d, "status", "train")
	if code != 0 || !strings.Contains(out, "nice:      -2\n") || !strings.Contains(out, "mps:       all threads, memory limit 1.0 GiB per GPU\n") {
		t.Errorf("status output:\n%s", out)
	}
	if got := priorityClass(0); got != "normal" {
		t.Errorf("priorityClass(0) = %q", got)
	}
}
