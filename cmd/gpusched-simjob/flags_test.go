package main

import (
	"io"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--vram", "2048", "--ramp", "1.5", "--hold", "0.25", "--exit-code", "3",
		"--oom-once", "/tmp/m", "--host-mem", "64", "--tick", "2"}, io.Discard)
	want := config{vramMiB: 2048, ramp: 1500 * time.Millisecond, hold: 250 * time.Millisecond, exitCode: 3,
		oomOnce: "/tmp/m", hostMiB: 64, tick: 2 * time.Second, ncclShm: true}
	if err != nil || cfg != want {
		t.Errorf("parseFlags = %+v, %v; want %+v", cfg, err, want)
	}
	cfg, err = parseFlags([]string{"--http", "8080", "--load-seconds", "2", "--model", "m", "--token-delay", "0.01", "--parallel", "4"}, io.Discard)
	want = config{httpPort: 8080, load: 2 * time.Second, ramp: 2 * time.Second, model: "m", tokenDelay: 10 * time.Millisecond, parallel: 4, ncclShm: true}
	if err != nil || cfg != want {
		t.Errorf("parseFlags(--http) = %+v, %v; want %+v (--load-seconds ramps the VRAM)", cfg, err, want)
	}
	for _, bad := range [][]string{
		{"--vram", "-1"},
		{"--ramp", "-1"},
		{"--hold", "NaN"},
		{"--exit-code", "256"},
		{"--nccl", "job"},
		{"--ticks", "3"},
		{"--tick", "1", "--ticks", "-1"},
		{"extra"},
		{"--http", "65536"},
		{"--load-seconds", "1"},
		{"--model", "m"},
		{"--http", "8080", "--load-seconds", "-1"},
		{"--parallel", "2"},
		{"--http", "8080", "--parallel", "-1"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}
