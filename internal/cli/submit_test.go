package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// submitted answers submit with jobs.
func submitted(jobs ...api.Job) map[string]handler {
	return map[string]handler{api.MethodSubmit: answer(result(api.SubmitResult{Jobs: jobs}))}
}

// writeFile writes a temporary file and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withStdin makes content the process's standard input while the test runs.
func withStdin(t *testing.T, content string) {
	t.Helper()
	f, err := os.Open(writeFile(t, "stdin", content))
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdin
	os.Stdin = f
	t.Cleanup(func() { os.Stdin = saved; f.Close() })
}

func TestSubmitCommand(t *testing.T) {
	d := newFakeDaemon(t, submitted(job("train")))
	out, errOut, code := ctl(t, d, "submit", "--clean-env", "--env", "A=1", "--name", "train", "--vram", "18G",
		"--gpus", "2", "--priority", "5", "--timeout", "2h", "--retries", "2", "--preemptible", "--dir", "/srv/exp",
		"--user", "bob", "--", "python", "train.py", "--lr", "3e-4")
	if code != 0 || errOut != "" || out != "submitted train: id j-train, running, vram 21.6 GiB\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	want := `{"name":"train","cmd":["python","train.py","--lr","3e-4"],"dir":"/srv/exp","env":{"A":"1"},"vram":18432,` +
		`"gpus":2,"priority":5,"timeout":"2h0m0s","retries":2,"preemptible":true,"user":"bob"}`
	if got := string(d.only(t).Params); got != want {
		t.Errorf("params %s\nwant   %s", got, want)
	}
}

func TestSubmitDefaults(t *testing.T) {
	t.Setenv("GPUSCHED_CLI_TEST", "inherited")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	d := newFakeDaemon(t, submitted(queuedJob("job-1")))
	out, errOut, code := ctl(t, d, "submit", "--env", "B=2", "--", "./eval.sh")
	if code != 0 || errOut != "" || out != "submitted job-1: id j-job-1, queued, vram auto\n" {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.SubmitParams
	d.params(t, api.MethodSubmit, &p)
	if p.Dir != wd || p.Env["GPUSCHED_CLI_TEST"] != "inherited" || p.Env["B"] != "2" || p.Env["PATH"] != os.Getenv("PATH") {
		t.Errorf("dir %q env %v: want the working directory and this environment plus B=2", p.Dir, p.Env)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(d.only(t).Params, &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "env")
	delete(raw, "dir")
	if b, _ := json.Marshal(raw); string(b) != `{"cmd":["./eval.sh"],"gpus":1}` {
		t.Errorf("params besides env and dir %s, want only cmd and gpus 1", b)
	}
}

// jobsFile is a jobs file of two lines with options and comments.
const jobsFile = `# sweep
[name=lr-1 vram=20G priority=7] python train.py --lr 1e-3

[preemptible timeout=600 gpus=1] python train.py --lr 1e-4  # no name
`

// wantFileJobs is the submit request the flags below make of jobsFile.
// The environment goes once, as the batch's default.
const wantFileJobs = `{"cmd":null,"env":{"A":"1"},"jobs":[` +
	`{"name":"lr-1","cmd":["/bin/sh","-c","python train.py --lr 1e-3"],"dir":"/srv/exp","vram":20480,"gpus":2,"priority":7,"retries":1},` +
	`{"cmd":["/bin/sh","-c","python train.py --lr 1e-4  # no name"],"dir":"/srv/exp","vram":"auto","gpus":1,"timeout":"10m0s","retries":1,"preemptible":true}]}`

func TestSubmitFile(t *testing.T) {
	path := writeFile(t, "sweep.txt", jobsFile)
	for _, stdin := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "stdin"}[stdin], func(t *testing.T) {
			arg := path
			if stdin {
				withStdin(t, jobsFile)
				arg = "-"
			}
			d := newFakeDaemon(t, submitted(job("lr-1"), queuedJob("job-2")))
			out, errOut, code := ctl(t, d, "submit", "--file", arg, "--vram", "auto", "--gpus", "2", "--retries", "1",
				"--clean-env", "--env", "A=1", "--dir", "/srv/exp")
			want := "submitted lr-1: id j-lr-1, running, vram 21.6 GiB\nsubmitted job-2: id j-job-2, queued, vram auto\n"
			if code != 0 || errOut != "" || out != want {
				t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
			}
			if got := string(d.only(t).Params); got != wantFileJobs {
				t.Errorf("params %s\nwant   %s", got, wantFileJobs)
			}
		})
	}
}

func TestSubmitCSV(t *testing.T) {
	path := writeFile(t, "runs.csv", "directory,executable,filename,epochs,priority\n/data/a,python,train.py,10,3\n/data/b,./run,cfg.yaml,,\n")
	d := newFakeDaemon(t, submitted(queuedJob("job-1"), queuedJob("job-2")))
	_, errOut, code := ctl(t, d, "submit", "--csv", path, "--vram", "20G", "--timeout", "12h", "--priority", "1", "--clean-env")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := `{"cmd":null,"jobs":[` +
		`{"cmd":["python","train.py","--epochs","10"],"dir":"/data/a","vram":20480,"gpus":1,"priority":3,"timeout":"12h0m0s"},` +
		`{"cmd":["./run","cfg.yaml"],"dir":"/data/b","vram":20480,"gpus":1,"priority":1,"timeout":"12h0m0s"}]}`
	if got := string(d.only(t).Params); got != want {
		t.Errorf("params %s\nwant   %s", got, want)
	}
}

func TestSubmitBadFileSendsNothing(t *testing.T) {
	tests := []struct {
		name string
		args func(dir string) []string
		want string
	}{
		{"jobs file", func(dir string) []string {
			return []string{"--file", writeFile(t, "jobs.txt", "echo ok\n[gpus=0] a\n[vram=1G vram=2G]\n")}
		}, "gpuschedctl: {DIR}/jobs.txt: 3 problems, nothing submitted:\n" +
			`{DIR}/jobs.txt:2: gpus "0": want a whole number, 1 or more` + "\n" +
			`{DIR}/jobs.txt:3: option "vram" is given twice` + "\n" +
			"{DIR}/jobs.txt:3: no command after the options\n"},
		{"csv", func(dir string) []string {
			return []string{"--csv", writeFile(t, "runs.csv", "rel,python,t.py,1,1\n")}
		}, "gpuschedctl: {DIR}/runs.csv: 1 problem, nothing submitted:\n" +
			`{DIR}/runs.csv:1: directory "rel" is not an absolute path` + "\n"},
		{"empty stdin", func(string) []string { withStdin(t, "# nothing\n"); return []string{"--file", "-"} },
			"gpuschedctl: stdin: no jobs: every line is blank or a comment\n"},
		{"missing file", func(dir string) []string { return []string{"--file", filepath.Join(dir, "nope")} },
			"gpuschedctl: open {DIR}/nope: no such file or directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, submitted(job("x")))
			args := tt.args(t.TempDir())
			out, errOut, code := ctl(t, d, append([]string{"submit"}, args...)...)
			want := strings.ReplaceAll(tt.want, "{DIR}", filepath.Dir(args[1]))
			if code != 1 || out != "" || errOut != want {
				t.Errorf("code %d, stdout %q, stderr\n%s\nwant 1 and\n%s", code, out, errOut, want)
			}
			if reqs := d.requests(); len(reqs) > 0 {
				t.Errorf("a bad file still reached the daemon: %+v", reqs)
			}
		})
	}
}

func TestSubmitTooLargeSendsNothing(t *testing.T) {
	line := "echo " + strings.Repeat("x", 62<<10) + "\n"
	path := writeFile(t, "jobs.txt", strings.Repeat(line, 20))
	d := newFakeDaemon(t, submitted(job("x")))
	out, errOut, code := ctl(t, d, "submit", "--file", path, "--clean-env")
	want := "gpuschedctl: the jobs make a 1.2 MiB request, over the daemon's limit of 1.0 MiB: submit fewer at a time, " +
		"or send a smaller environment with --clean-env and --env\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if reqs := d.requests(); len(reqs) > 0 {
		t.Errorf("an oversize request was sent: %d requests", len(reqs))
	}
}

func TestSubmitRefusedByTheDaemon(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodSubmit: answer(failure(api.CodeInvalidArgument,
		`submit: nothing queued: job 2: submit "b": exec: "nope": executable file not found in $PATH`))})
	_, errOut, code := ctl(t, d, "submit", "--file", writeFile(t, "j", "a\nnope\n"))
	want := `gpuschedctl: submit: nothing queued: job 2: submit "b": exec: "nope": executable file not found in $PATH (invalid_argument)` + "\n"
	if code != 1 || errOut != want {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}
