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
	for _, bad := range [][]string{
		{"--vram", "-1"},
		{"--ramp", "-1"},
		{"--hold", "NaN"},
		{"--exit-code", "256"},
		{"--nccl", "job"},
		{"--ticks", "3"},
		{"--tick", "1", "--ticks", "-1"},
		{"extra"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}
