package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

var frozeTrain = api.CheckpointResult{Name: "train", Op: "freeze", State: api.StateFrozen, Driver: "cli",
	PIDs: []int{10, 11}, Bytes: 8 << 30, GPUs: []string{"GPU-aaaa"},
	MS: map[string]float64{"lock": 1.5, "checkpoint": 310, "stop": 0.25, "total": 312.4}}

var thawedTrain = api.CheckpointResult{Name: "train", Op: "thaw", State: api.StateRunning, Driver: "api",
	PIDs: []int{10}, Bytes: 512 << 20, GPUs: []string{"GPU-aaaa"},
	MS: map[string]float64{"admit": 0.01, "continue": 0.3, "restore": 40, "unlock": 2, "total": 43}}

func TestFreeze(t *testing.T) {
	tests := []struct {
		args     []string
		stop     *bool
		lockWait time.Duration
	}{
		{[]string{"freeze", "train"}, nil, 0},
		{[]string{"freeze", "train", "--no-stop", "--lock-timeout", "30s"}, new(bool), 30 * time.Second},
	}
	for _, tt := range tests {
		d := newFakeDaemon(t, map[string]handler{api.MethodFreeze: answer(result(frozeTrain))})
		out, errOut, code := ctl(t, d, tt.args...)
		want := "froze train: 8.0 GiB from 2 CUDA processes in 312ms (lock 1.50ms, checkpoint 310ms, stop 0.25ms) [cli driver]\n"
		if code != 0 || errOut != "" || out != want {
			t.Fatalf("%v: code %d, stderr %q, stdout %q", tt.args, code, errOut, out)
		}
		var p api.FreezeParams
		d.params(t, api.MethodFreeze, &p)
		if p.Name != "train" || (p.Stop == nil) != (tt.stop == nil) || time.Duration(p.LockTimeout) != tt.lockWait {
			t.Errorf("%v: params %+v", tt.args, p)
		}
	}
}

func TestThaw(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodThaw: answer(result(thawedTrain))})
	out, errOut, code := ctl(t, d, "thaw", "train", "--timeout", "1m")
	want := "thawed train: 512 MiB from 1 CUDA process onto GPU-aaaa in 43ms (admit 0.01ms, continue 0.30ms, restore 40ms, unlock 2.00ms) [api driver]\n"
	if code != 0 || errOut != "" || out != want {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.ThawParams
	d.params(t, api.MethodThaw, &p)
	if p.Name != "train" || time.Duration(p.Timeout) != time.Minute {
		t.Errorf("params %+v", p)
	}
}

func TestThawRefused(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodThaw: answer(failure(api.CodeResourceExhausted, `thaw "train": GPU 0 needs 8192 MiB`))})
	_, errOut, code := ctl(t, d, "thaw", "train")
	if code != 1 || errOut != "gpuschedctl: thaw \"train\": GPU 0 needs 8192 MiB (resource_exhausted)\n" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
}

func TestSwap(t *testing.T) {
	res := api.SwapResult{Freeze: frozeTrain, Thaw: thawedTrain, Concurrent: true, MS: map[string]float64{"total": 313}}
	res.Thaw.Name = "eval"
	d := newFakeDaemon(t, map[string]handler{api.MethodSwap: answer(result(res))})
	out, errOut, code := ctl(t, d, "swap", "train", "eval")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "swapped train off and eval on concurrently in 313ms\n") {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.SwapParams
	d.params(t, api.MethodSwap, &p)
	if p.Freeze != "train" || p.Thaw != "eval" {
		t.Errorf("params %+v", p)
	}
	if _, _, code := ctl(t, d, "swap", "train"); code != 2 {
		t.Errorf("swap with one name: exit %d, want 2", code)
	}
}

func TestMigrate(t *testing.T) {
	res := thawedTrain
	res.Op = "migrate"
	d := newFakeDaemon(t, map[string]handler{api.MethodMigrate: answer(result(res))})
	out, errOut, code := ctl(t, d, "migrate", "train", "--gpu", "1", "--gpu", "GPU-bbbb")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "migrated train:") {
		t.Fatalf("code %d, stderr %q, stdout %q", code, errOut, out)
	}
	var p api.MigrateParams
	d.params(t, api.MethodMigrate, &p)
	if p.Name != "train" || len(p.GPUs) != 2 || p.GPUs[0] != (api.GPURef{Index: 1}) || p.GPUs[1].UUID != "GPU-bbbb" {
		t.Errorf("params %+v", p)
	}
	if _, _, code := ctl(t, d, "migrate", "train"); code != 2 {
		t.Errorf("migrate without --gpu: exit %d, want 2", code)
	}
}
