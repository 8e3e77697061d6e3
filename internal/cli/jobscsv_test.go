package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// row is the spec of a CSV row with the defaults changed by set.
func row(dir string, cmd []string, set func(*api.JobSpec)) api.JobSpec {
	s := jobDefaults
	s.Dir, s.Cmd = dir, cmd
	if set != nil {
		set(&s)
	}
	return s
}

func TestParseJobsCSV(t *testing.T) {
	tests := []struct {
		name, in string
		want     []api.JobSpec
	}{
		{"header, comments and blank lines",
			"directory,executable,filename,epochs,priority\n# a comment\n\n/data/a,python,train.py,10,5\n",
			[]api.JobSpec{row("/data/a", []string{"python", "train.py", "--epochs", "10"}, func(s *api.JobSpec) { s.Priority = 5 })}},
		{"no header; empty epochs and priority", "/data/a,./run,cfg.yaml,,\n/data/b,python3,t.py,+3,-2\n",
			[]api.JobSpec{
				row("/data/a", []string{"./run", "cfg.yaml"}, nil),
				row("/data/b", []string{"python3", "t.py", "--epochs", "3"}, func(s *api.JobSpec) { s.Priority = -2 }),
			}},
		{"spaces, quotes, CRLF and a spreadsheet's byte-order mark",
			"\ufeffdirectory,executable,filename,epochs,priority\r\n \"/data/my dir\", python , \"a,b.py\",2 , 1 \r\n",
			[]api.JobSpec{row("/data/my dir", []string{"python", "a,b.py", "--epochs", "2"}, nil)}},
		{"a header later is a row", "/d,python,t.py,1,1\n/directory,executable,filename,1,1\n",
			[]api.JobSpec{
				row("/d", []string{"python", "t.py", "--epochs", "1"}, nil),
				row("/directory", []string{"executable", "filename", "--epochs", "1"}, nil),
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseJobsCSV(strings.NewReader(tt.in), "runs.csv", jobDefaults)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseJobsCSVErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "runs.csv: no jobs: every row is blank, a comment or the header"},
		{"only a header", "directory,executable,filename,epochs,priority\n# none yet\n",
			"runs.csv: no jobs: every row is blank, a comment or the header"},
		{"every bad row, numbered", "" +
			"directory,executable,filename,epochs,priority\n" +
			"/ok,python,t.py,1,1\n" +
			"data,python,t.py,1,1\n" +
			",,,0,high\n" +
			"/d,python,t.py,ten,\n" +
			"/d,python,t.py\n" +
			"/d,py\"thon,t.py,1,1\n" +
			"# comment\n" +
			"/d,python,t.py,-1,1.5\n" +
			"/d,python,\"t\x00.py\",,\n" +
			"/d,\xff,t.py,,\n",
			"runs.csv: 13 problems, nothing submitted:\n" +
				`runs.csv:3: directory "data" is not an absolute path` + "\n" +
				`runs.csv:4: directory is empty: want an absolute path` + "\n" +
				`runs.csv:4: executable is empty` + "\n" +
				`runs.csv:4: filename is empty` + "\n" +
				`runs.csv:4: epochs "0": want a whole number, 1 or more` + "\n" +
				`runs.csv:4: priority "high": want a whole number` + "\n" +
				`runs.csv:5: epochs "ten": want a whole number, 1 or more` + "\n" +
				`runs.csv:6: want 5 fields (directory,executable,filename,epochs,priority), got 3` + "\n" +
				`runs.csv:7: bare " in non-quoted-field` + "\n" +
				`runs.csv:9: epochs "-1": want a whole number, 1 or more` + "\n" +
				`runs.csv:9: priority "1.5": want a whole number` + "\n" +
				`runs.csv:10: filename contains a NUL byte` + "\n" +
				`runs.csv:11: executable is not valid UTF-8`},
		{"an unclosed quote is reported where it opens", "/d,python,t.py,1,1\n/d,\"python,t.py,1,1\n/e,x,y,,\n",
			"runs.csv: 1 problem, nothing submitted:\n" +
				`runs.csv:2: extraneous or missing " in quoted-field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseJobsCSV(strings.NewReader(tt.in), "runs.csv", jobDefaults)
			if err == nil || got != nil {
				t.Fatalf("got %+v, %v; want no jobs and an error", got, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n%s\nwant\n%s", err, tt.want)
			}
		})
	}
}

// FuzzParseJobsCSV checks that the importer never panics or hangs, fails
// with nothing, and otherwise returns valid jobs that survive JSON.
func FuzzParseJobsCSV(f *testing.F) {
	for _, s := range []string{
		"", "directory,executable,filename,epochs,priority\n/d,python,t.py,10,5\n", "/d,x,y,,\n", "\ufeff/d,x,y,,",
		"# c\n/d,\"a,b\",\"c\"\"d\",1,-1\r\n", "/d,x\n", "d,x,y,1,1", "/d,x,y,0,1", "/d,\"x", "/d,x\"y,z,,",
		"/d,x,y,,\n/d,x,y,,\n", "/d,\x00,y,,", "/d,\xff,y,,", "/d,x,y,99999999999999999999,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := parseJobsCSV(strings.NewReader(in), "f", jobDefaults)
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
			if n := len(s.Cmd); n != 2 && n != 4 || s.Cmd[1] == "" || n == 4 && s.Cmd[2] != "--epochs" {
				t.Fatalf("cmd %q is not EXECUTABLE FILENAME [--epochs N]", s.Cmd)
			}
		}
	})
}
