package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestGPURef(t *testing.T) {
	tests := []struct {
		in   string
		want GPURef
		ok   bool
	}{
		{`0`, GPURef{Index: 0}, true},
		{`3`, GPURef{Index: 3}, true},
		{`"2"`, GPURef{Index: 2}, true},
		{`"GPU-abc"`, GPURef{UUID: "GPU-abc"}, true},
		{`-1`, GPURef{}, false},
		{`"-1"`, GPURef{UUID: "-1"}, false},
		{`""`, GPURef{}, false},
		{`1.5`, GPURef{}, false},
		{`{}`, GPURef{}, false},
	}
	for _, tt := range tests {
		var g GPURef
		err := json.Unmarshal([]byte(tt.in), &g)
		if (err == nil) != tt.ok || tt.ok && g != tt.want {
			t.Errorf("%s: got %+v, %v", tt.in, g, err)
		}
		if tt.ok {
			b, _ := json.Marshal(g)
			var back GPURef
			if json.Unmarshal(b, &back); back != g {
				t.Errorf("%s: round trip %s -> %+v", tt.in, b, back)
			}
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{`10`, 10 * time.Second, true},
		{`0.25`, 250 * time.Millisecond, true},
		{`"1.5s"`, 1500 * time.Millisecond, true},
		{`"2h"`, 2 * time.Hour, true},
		{`"soon"`, 0, false},
		{`-1`, 0, false},
		{`"-1s"`, 0, false},
		{`true`, 0, false},
		// Past what time.Duration holds: they wrapped to a negative one
		// (a job's timeout at once, a kill's grace none).
		{`1e308`, 0, false},
		{`9.3e9`, 0, false},
		{`9.2e9`, 9200000000 * time.Second, true},
		{`"9999999999h"`, 0, false},
	}
	for _, tt := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if (err == nil) != tt.ok || time.Duration(d) != tt.want {
			t.Errorf("%s: got %v, %v", tt.in, time.Duration(d), err)
		}
	}
	if b, _ := json.Marshal(Duration(90 * time.Second)); string(b) != `"1m30s"` {
		t.Errorf("marshal: %s", b)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "train-1", "Model_v2.ckpt", strings.Repeat("x", 64), "..."} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", "a b", "é", "x\x00", strings.Repeat("x", 65), "$(id)"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
