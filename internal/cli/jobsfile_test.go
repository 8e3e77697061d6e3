package cli

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpusched/gpusched/pkg/api"
)

// jobDefaults are the flags' defaults the parser tests start from.
var jobDefaults = api.JobSpec{Dir: "/home/alice/exp", Env: map[string]string{"PATH": "/usr/bin"}, GPUs: 1, Priority: 1}

// shell is the spec of a jobs-file line running text with the defaults
// changed by set.
func shell(text string, set func(*api.JobSpec)) api.JobSpec {
	s := jobDefaults
	s.Cmd = []string{"/bin/sh", "-c", text}
	if set != nil {
		set(&s)
	}
	return s
}

func TestParseJobsFile(t *testing.T) {
	tests := []struct {
		name, in string
		want     []api.JobSpec
	}{
		{"one command", "python train.py --lr 3e-4\n", []api.JobSpec{shell("python train.py --lr 3e-4", nil)}},
		{"no final newline, CRLF, blanks and comments",
			"# sweep\r\n\r\n   \t\n  # indented comment\necho a\r\n  echo b  \necho c",
			[]api.JobSpec{shell("echo a", nil), shell("echo b", nil), shell("echo c", nil)}},
		{"every option", "[vram=18G gpus=2 priority=-5 timeout=2h retries=2 preemptible name=train-a.1]  python train.py\n",
			[]api.JobSpec{shell("python train.py", func(s *api.JobSpec) {
				s.VRAM, s.GPUs, s.Priority, s.Timeout = api.VRAM{MiB: 18 << 10}, 2, -5, api.Duration(2*time.Hour)
				s.Retries, s.Preemptible, s.Name = 2, true, "train-a.1"
			})}},
		{"options apply to their line only", "[vram=auto timeout=90 preemptible=true]echo a\necho b\n",
			[]api.JobSpec{
				shell("echo a", func(s *api.JobSpec) {
					s.VRAM, s.Timeout, s.Preemptible = api.VRAM{Auto: true}, api.Duration(90*time.Second), true
				}),
				shell("echo b", nil),
			}},
		{"options override the defaults", "[preemptible=false vram=512MiB priority=0 timeout=0] run\n",
			[]api.JobSpec{shell("run", func(s *api.JobSpec) { s.VRAM, s.Priority = api.VRAM{MiB: 512}, 0 })}},
		{"an empty block lets a command start with [", "  [] [ -f data ] && ./train # go\n",
			[]api.JobSpec{shell("[ -f data ] && ./train # go", nil)}},
		{"# inside a command is the shell's", "echo '#1' # comment\n", []api.JobSpec{shell("echo '#1' # comment", nil)}},
		{"a line of 64 KiB", strings.Repeat("x", maxJobLine) + "\r\n", []api.JobSpec{shell(strings.Repeat("x", maxJobLine), nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseJobsFile(strings.NewReader(tt.in), "jobs.txt", jobDefaults)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseJobsFileErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "jobs.txt: no jobs: every line is blank or a comment"},
		{"only comments", "# a\n\n  # b\n", "jobs.txt: no jobs: every line is blank or a comment"},
		{"every bad line, numbered", "" +
			"echo ok\n" +
			"[vram=18X] a\n" +
			"# fine\n" +
			"[gpus=0 priority=high] b\n" +
			"[timeout=-1s retries=-1] c\n" +
			"[timeout=soon preemptible=maybe] d\n" +
			"[name=a/b] e\n" +
			"[vrma=1G] f\n" +
			"[gpus=1 gpus=2] g\n" +
			"[vram] h\n" +
			"[name=] i\n" +
			"[gpus=2\n" +
			"  [gpus=2]   \n" +
			"echo \x00\n" +
			"echo \xff\n" +
			"[timeout=99999999999999999] j\n" +
			"[vram=0] k\n",
			"jobs.txt: 18 problems, nothing submitted:\n" +
				`jobs.txt:2: vram: size "18X": unknown unit "x" (want M, G or T) (or "auto")` + "\n" +
				`jobs.txt:4: gpus "0": want a whole number, 1 or more` + "\n" +
				`jobs.txt:4: priority "high": want a whole number` + "\n" +
				`jobs.txt:5: timeout "-1s": must not be negative` + "\n" +
				`jobs.txt:5: retries "-1": want a whole number, 0 or more` + "\n" +
				`jobs.txt:6: timeout "soon": want a duration like 90m or 2h30m, or whole seconds` + "\n" +
				`jobs.txt:6: preemptible "maybe": want true or false` + "\n" +
				`jobs.txt:7: name "a/b": only letters, digits, '.', '_' and '-' are allowed` + "\n" +
				`jobs.txt:8: unknown option "vrma" (want vram, gpus, priority, timeout, retries, preemptible, name, nice, mps_threads or mps_mem_limit)` + "\n" +
				`jobs.txt:9: option "gpus" is given twice` + "\n" +
				`jobs.txt:10: option "vram" needs a value: vram=SIZE or vram=auto` + "\n" +
				`jobs.txt:11: option "name" needs a value: name=NAME` + "\n" +
				`jobs.txt:12: unclosed "[": end the options with "]"` + "\n" +
				`jobs.txt:13: no command after the options` + "\n" +
				`jobs.txt:14: line contains a NUL byte` + "\n" +
				`jobs.txt:15: line is not valid UTF-8` + "\n" +
				`jobs.txt:16: timeout "99999999999999999": too long` + "\n" +
				`jobs.txt:17: vram "0": must be more than 0 (leave it out for undeclared)`},
		{"a line over 64 KiB, among others", "a\n" + strings.Repeat("y", maxJobLine+1) + "\nb\n" + strings.Repeat("z", 3*maxJobLine),
			"jobs.txt: 2 problems, nothing submitted:\n" +
				"jobs.txt:2: line is longer than 64 KiB\n" +
				"jobs.txt:4: line is longer than 64 KiB"},
		{"duplicate names", "[name=a] x\n[name=b] y\n[name=a] z\n",
			"jobs.txt: 1 problem, nothing submitted:\n" +
				`jobs.txt:3: name "a" is already used on line 1`},
		{"a NUL in a comment", "# \x00\necho\n", "jobs.txt: 1 problem, nothing submitted:\njobs.txt:1: line contains a NUL byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseJobsFile(strings.NewReader(tt.in), "jobs.txt", jobDefaults)
			if err == nil || got != nil {
				t.Fatalf("got %+v, %v; want no jobs and an error", got, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n%s\nwant\n%s", err, tt.want)
			}
		})
	}
}

// FuzzParseJobsFile checks that the parser never panics or hangs, fails
// with nothing, and otherwise returns jobs that are valid and survive
// their trip through JSON unchanged.
func FuzzParseJobsFile(f *testing.F) {
	for _, s := range []string{
		"", "echo a\n", "# c\n\n  echo b\r\n", "[vram=18G gpus=2 priority=5 timeout=2h retries=2 preemptible name=foo] run\n",
		"[vram=auto timeout=3600 preemptible=false] x", "[] [ -f x ] && y", "[gpus=2", "[name=a] x\n[name=a] y",
		"[vram=0] x", "[bogus] x", "[vram vram=1G] x", "echo \x00", "\xff\xfe", "[timeout=1e9] x", "[name=..] x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := parseJobsFile(strings.NewReader(in), "f", jobDefaults)
		if err != nil {
			if specs != nil {
				t.Fatalf("error %v with jobs %+v", err, specs)
			}
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		checkSpecs(t, specs)
		for _, s := range specs {
			if len(s.Cmd) != 3 || s.Cmd[0] != "/bin/sh" || s.Cmd[1] != "-c" || strings.TrimSpace(s.Cmd[2]) != s.Cmd[2] || len(s.Cmd[2]) > maxJobLine {
				t.Fatalf("cmd %q is not a trimmed shell line", s.Cmd)
			}
		}
	})
}

// checkSpecs fails unless specs is a non-empty list of valid jobs with
// unique names, each the same after a trip through JSON.
func checkSpecs(t *testing.T, specs []api.JobSpec) {
	t.Helper()
	if len(specs) == 0 {
		t.Fatal("no error and no jobs")
	}
	names := map[string]bool{}
	for _, s := range specs {
		if len(s.Cmd) == 0 || s.Cmd[0] == "" {
			t.Fatalf("job %+v has no command", s)
		}
		for _, a := range s.Cmd {
			if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
				t.Fatalf("argument %q cannot be sent", a)
			}
		}
		if s.Name != "" {
			if err := api.ValidateName(s.Name); err != nil || names[s.Name] {
				t.Fatalf("name %q: invalid (%v) or used twice", s.Name, err)
			}
			names[s.Name] = true
		}
		if s.GPUs < 1 || s.Retries < 0 || s.Timeout < 0 || s.VRAM.Auto && s.VRAM.MiB != 0 || !filepath.IsAbs(s.Dir) {
			t.Fatalf("invalid job %+v", s)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back api.JobSpec
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("job %+v came back from %s as %+v (%v)", s, b, back, err)
		}
	}
}
