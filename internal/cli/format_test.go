package cli

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestMiB(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 MiB", 512: "512 MiB", 1023: "1023 MiB", 1024: "1.0 GiB", 12288: "12.0 GiB", 81559: "79.6 GiB"} {
		if got := mib(n); got != want {
			t.Errorf("mib(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 45 * time.Second: "45s", 12*time.Minute + 59*time.Second: "12m",
		3 * time.Hour: "3h", 3*time.Hour + 12*time.Minute: "3h12m", 50 * time.Hour: "2d2h", 48 * time.Hour: "2d",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestExitText(t *testing.T) {
	tests := []struct {
		e    *api.Exit
		want string
	}{
		{nil, "unknown"},
		{&api.Exit{Code: intp(0)}, "exit 0"},
		{&api.Exit{Code: intp(137)}, "exit 137"},
		{&api.Exit{Signal: "SIGKILL"}, "signal SIGKILL"},
		{&api.Exit{Unknown: true, Reason: "lost"}, "unknown"},
	}
	for _, tt := range tests {
		if got := exitText(tt.e); got != tt.want {
			t.Errorf("exitText(%+v) = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestCmdline(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"python", "-u", "train.py", "--lr=3e-4"}, "python -u train.py --lr=3e-4"},
		{[]string{"sh", "-c", "echo hi; exit 1"}, "sh -c 'echo hi; exit 1'"},
		{[]string{"echo", "it's", ""}, `echo 'it'\''s' ''`},
	}
	for _, tt := range tests {
		if got := cmdline(tt.argv); got != tt.want {
			t.Errorf("cmdline(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}
