package config

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	t.Setenv("GPUSCHED_SOCKET", "/run/env.sock")
	c, err := load([]string{"--sim", "2x16G", "--kill-grace", "3s", "--state-dir", "/srv/gs"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/run/env.sock" || c.SimDir != "/run/sim" || c.Sim != "2x16G" || c.KillGrace != 3*time.Second || c.StateDir != "/srv/gs" {
		t.Fatalf("%+v", c)
	}
	c, err = load([]string{"--socket", "/run/x/s.sock"}, io.Discard)
	if err != nil || c.Socket != "/run/x/s.sock" || c.SimDir != "/run/x/sim" {
		t.Fatalf("flag over env: %+v %v", c, err)
	}
}

func TestLoadHealthFilters(t *testing.T) {
	c, err := load([]string{"--max-temp", "85", "--max-util", "90", "--max-power", "350.5", "--min-free", "1G", "--ban-gpu", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxTempC != 85 || c.MaxUtilPercent != 90 || c.MaxPowerWatts != 350.5 || c.MinFreeMiB != 1024 || len(c.BannedGPUs) != 1 {
		t.Fatalf("health filters: %+v", c)
	}
	if d := Default(); d.MaxTempC != 0 {
		t.Errorf("--max-temp defaults to %d, want 0 (off)", d.MaxTempC)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--socket", "rel.sock"}, "--socket"},
		{[]string{"--socket", "/" + strings.Repeat("s", 120)}, "longer than"},
		{[]string{"--state-dir", "state"}, "--state-dir"},
		{[]string{"--log-dir", "logs"}, "--log-dir"},
		{[]string{"--kill-grace", "0s"}, "--kill-grace"},
		{[]string{"--log-max-bytes", "10"}, "--log-max-bytes"},
		{[]string{"--log-keep", "-1"}, "--log-keep"},
		{[]string{"--gpu-poll", "1ms"}, "--gpu-poll"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--init-path", "gpuschedd"}, "--init-path"},
		{[]string{"--cgroup-root", "sys/fs/cgroup/x"}, "--cgroup-root"},
		{[]string{"--cgroup-root", "/sys/fs/cgroup/../x"}, "--cgroup-root"},
		{[]string{"--cgroup-root", "off"}, "--cgroup-root"},
		{[]string{"--max-util", "101"}, "--max-util 101: must be 0..100"},
		{[]string{"--max-power", "-1"}, "--max-power -1: must not be negative"},
		{[]string{"--max-temp", "-1"}, "--max-temp -1: must be 0..150 degrees C"},
		{[]string{"--max-temp", "151"}, "--max-temp 151: must be 0..150 degrees C"},
		{[]string{"--thaw-margin", "10"}, `size "10" has no unit: did you mean 10G?`},
		{[]string{"--ram-budget", "63"}, `size "63" has no unit: did you mean 63G?`},
		{[]string{"--max-cpu-per-user", "-0.1"}, "--max-cpu-per-user -0.1: must be 0 (no cap) or 0.0001..1024"},
		{[]string{"--max-cpu-per-user", "1e-300"}, "--max-cpu-per-user 1e-300: must be 0 (no cap)"},
		{[]string{"--max-cpu-per-user", "NaN"}, "--max-cpu-per-user NaN: must be 0 (no cap)"},
		{[]string{"--log-disk-fraction", "1.5"}, "--log-disk-fraction 1.5: must be 0..1"},
		{[]string{"--log-disk-fraction", "NaN"}, "--log-disk-fraction NaN: must be 0..1"},
		{[]string{"--user-ram-fraction", "-0.1"}, "--user-ram-fraction -0.1: must be 0..1"},
		{[]string{"--keep-finished-log-fraction", "-0.5"}, "--keep-finished-log-fraction -0.5: must be 0..1"},
		{[]string{"--disk-keep-free", "2"}, "--disk-keep-free 2: must be 0..1"},
		{[]string{"--realtime-priority", "100"}, "--realtime-priority 100: must be 0 (the fair class) or 1..99"},
		{[]string{"--realtime-priority", "-1"}, "--realtime-priority -1: must be 0"},
		{[]string{"--realtime-cpu", "0"}, "--realtime-cpu 0: must be more than 0"},
		{[]string{"--realtime-cpu", "NaN"}, "--realtime-cpu NaN: must be more than 0"},
		{[]string{"--daemon-cpus", "1-0"}, `--daemon-cpus "1-0": range "1-0" runs backwards`},
		{[]string{"--daemon-cpus", "x"}, `--daemon-cpus "x": "x" is not a CPU number`},
		{[]string{"--daemon-cpus", "4096"}, `--daemon-cpus "4096": CPU 4096: past the last one`},
		{[]string{"--daemon-tasks", "-1"}, "--daemon-tasks -1: must be 0 (no reserve) or 1..4194304"},
		{[]string{"--daemon-tasks", "4194305"}, "--daemon-tasks 4194305: must be 0"},
		{[]string{"--max-temp", "hot"}, "invalid value"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--no-such-flag"}, "not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := load(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestCgroupRoot(t *testing.T) {
	for _, v := range []string{"", "none", "/sys/fs/cgroup/gpusched"} {
		c, err := load([]string{"--cgroup-root", v}, io.Discard)
		if err != nil || c.CgroupRoot != v {
			t.Errorf("--cgroup-root %q: %q, %v", v, c.CgroupRoot, err)
		}
	}
	if Default().CgroupRoot != "" {
		t.Errorf("default --cgroup-root %q, want \"\" (auto)", Default().CgroupRoot)
	}
}

func TestMetricsAddr(t *testing.T) {
	for in, want := range map[string]string{"9400": "127.0.0.1:9400", ":9400": "127.0.0.1:9400", "0.0.0.0:9400": "0.0.0.0:9400", "[::1]:80": "[::1]:80"} {
		c, err := load([]string{"--metrics-addr", in}, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got, _ := c.MetricsListenAddr(); got != want {
			t.Errorf("--metrics-addr %s listens on %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"x", "host:", ":0", ":70000", "a:b:c"} {
		if _, err := load([]string{"--metrics-addr", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("--metrics-addr %q: got %v, want an error naming the flag", bad, err)
		}
	}
	if Default().MetricsAddr != "" {
		t.Error("metrics must be off by default")
	}
}

// TestVersionFlag: --version asks for the version before anything is read
// or checked, even a configuration that would not load.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--config", "/nonexistent.toml", "--version", "--kill-grace", "0s"}} {
		if _, err := load(args, io.Discard); !errors.Is(err, ErrVersion) {
			t.Errorf("%q: %v, want ErrVersion", args, err)
		}
	}
}
