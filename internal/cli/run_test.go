package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestRunRequest(t *testing.T) {
	t.Setenv("GPUSCHED_CLI_TEST", "inherited")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, p api.RunParams)
	}{
		{"inherits the environment", []string{"run", "train", "--env", "A=1", "--", "python", "-u", "train.py"},
			func(t *testing.T, p api.RunParams) {
				if p.Env["GPUSCHED_CLI_TEST"] != "inherited" || p.Env["A"] != "1" || p.Env["PATH"] != os.Getenv("PATH") {
					t.Errorf("env %v lacks the caller's environment or --env", p.Env)
				}
			}},
		{"--env overrides the inherited value", []string{"run", "train", "--env", "GPUSCHED_CLI_TEST=mine", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				if p.Env["GPUSCHED_CLI_TEST"] != "mine" {
					t.Errorf("GPUSCHED_CLI_TEST = %q, want mine", p.Env["GPUSCHED_CLI_TEST"])
				}
			}},
		{"--clean-env sends only --env", []string{"run", "train", "--clean-env", "--env", "A=1", "--env", "B=x=y", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				if want := map[string]string{"A": "1", "B": "x=y"}; !reflect.DeepEqual(p.Env, want) {
					t.Errorf("env = %v, want %v", p.Env, want)
				}
			}},
		{"command after -- keeps its flags", []string{"run", "train", "--", "python", "--dir", "x", "--gpu", "--", "y"},
			func(t *testing.T, p api.RunParams) {
				if want := []string{"python", "--dir", "x", "--gpu", "--", "y"}; !reflect.DeepEqual(p.Cmd, want) {
					t.Errorf("cmd = %q, want %q", p.Cmd, want)
				}
				if p.Dir != wd || p.GPUs != nil {
					t.Errorf("dir %q gpus %v: flags after -- were parsed", p.Dir, p.GPUs)
				}
			}},
		{"dir defaults to the working directory", []string{"run", "train", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				if p.Dir != wd {
					t.Errorf("dir = %q, want %q", p.Dir, wd)
				}
			}},
		{"relative --dir is made absolute", []string{"run", "train", "--dir", "sub/dir", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				if want := filepath.Join(wd, "sub/dir"); p.Dir != want {
					t.Errorf("dir = %q, want %q", p.Dir, want)
				}
			}},
		{"gpus by index and UUID", []string{"run", "train", "--gpu", "0", "--gpu", "GPU-5f0c,3", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				want := []api.GPURef{{Index: 0}, {UUID: "GPU-5f0c"}, {Index: 3}}
				if !reflect.DeepEqual(p.GPUs, want) {
					t.Errorf("gpus = %v, want %v", p.GPUs, want)
				}
			}},
		{"nice and user", []string{"run", "train", "--nice", "5", "--user", "bob", "--", "true"},
			func(t *testing.T, p api.RunParams) {
				if p.Nice != 5 || p.User != "bob" {
					t.Errorf("nice %d user %q, want 5 bob", p.Nice, p.User)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodRun: answer(result(proc("train")))})
			out, errOut, code := ctl(t, d, tt.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			if want := "started train: running, pid 4242\n"; out != want {
				t.Errorf("stdout %q, want %q", out, want)
			}
			var p api.RunParams
			d.params(t, api.MethodRun, &p)
			if p.Name != "train" {
				t.Errorf("name = %q, want train", p.Name)
			}
			tt.check(t, p)
		})
	}
}
