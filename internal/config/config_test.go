package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	t.Setenv("GPUSCHED_SOCKET", "/tmp/env.sock")
	c, err := Load([]string{"--sim", "2x16G", "--kill-grace", "3s", "--state-dir", "/srv/gs"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/tmp/env.sock" || c.SimDir != "/tmp/sim" || c.Sim != "2x16G" || c.KillGrace != 3*time.Second || c.StateDir != "/srv/gs" {
		t.Fatalf("%+v", c)
	}
	c, err = Load([]string{"--socket", "/run/x/s.sock"}, io.Discard)
	if err != nil || c.Socket != "/run/x/s.sock" || c.SimDir != "/run/x/sim" {
		t.Fatalf("flag over env: %+v %v", c, err)
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
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--no-such-flag"}, "not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := Load(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}
