package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestStatusOverview(t *testing.T) {
	st := api.Status{
		Version: "0.3.0", Protocol: 1, Backend: "sim", UptimeSeconds: 3*3600 + 12*60 + 5,
		Processes: 5,
		States:    map[api.State]int{api.StateExited: 1, api.StateRunning: 2, api.StateFrozen: 1, "hibernated": 1},
		HostMiB:   8192, RAMBudgetMiB: 65536, Driver: "sim",
		DiskBytes: 3 << 29, DiskBudget: 500 << 30, DiskFree: 900 << 30, DiskKeepFree: 100 << 30, CRIU: "4.1.1",
		Jobs: map[api.JobState]int{api.JobQueued: 12, api.JobRunning: 3, api.JobDone: 40}, Leases: 1,
		GPUs: []api.GPUSummary{
			{Index: 0, UUID: "GPU-aaaa", TotalMiB: 81920, UsedMiB: 12800, FreeMiB: 69120},
			{Index: 1, UUID: "GPU-bbbb", TotalMiB: 81920, UsedMiB: 0, FreeMiB: 81920},
		},
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(st))})
	out, errOut, code := ctl(t, d, "status")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"version:     0.3.0 (protocol 1)\n" +
		"backend:     sim\n" +
		"uptime:      3h12m\n" +
		"processes:   5 (running 2, frozen 1, hibernated 1, exited 1)\n" +
		"jobs:        3 running, 12 queued, 40 done; 1 lease\n" +
		"checkpoint:  sim driver\n" +
		"host ram:    8.0 GiB frozen (budget 64.0 GiB)\n" +
		"disk tier:   criu 4.1.1, snapshots 1.5 GiB (budget 500.0 GiB), 900.0 GiB free on its disk, 100.0 GiB of it kept free\n" +
		"\n" +
		"GPU  UUID      USED      TOTAL     FREE\n" +
		"0    GPU-aaaa  12.5 GiB  80.0 GiB  67.5 GiB\n" +
		"1    GPU-bbbb  0 MiB     80.0 GiB  80.0 GiB\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if req := d.only(t); req.Method != api.MethodStatus || len(req.Params) != 0 {
		t.Errorf("request %s %s, want status without params", req.Method, req.Params)
	}
}

// TestStatusShowsTheCallersShares: a user's status adds their own part of
// each tier beside their share of it, where they have one.
func TestStatusShowsTheCallersShares(t *testing.T) {
	st := api.Status{Backend: "sim", Driver: "sim", HostMiB: 900, RAMBudgetMiB: 1000, CallerHostMiB: 300, RAMShareMiB: 500,
		DiskBytes: 3 << 30, DiskFree: 90 << 30, CRIU: "4.2.1", CallerDiskBytes: 1 << 30, DiskShare: 25 << 30}
	d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(st))})
	out, errOut, code := ctl(t, d, "status")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, w := range []string{
		"host ram:    900 MiB frozen (budget 1000 MiB); yours 300 MiB of 500 MiB\n",
		"90.0 GiB free on its disk; yours 1.0 GiB of 25.0 GiB\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestStatusProcess(t *testing.T) {
	running := proc("train")
	lost := exited("lost", api.Exit{Unknown: true, Reason: "daemon restarted"})
	tests := []struct {
		p    api.Process
		want []string
	}{
		{running, []string{
			"name:      train\n",
			"id:        id-train\n",
			"state:     running\n",
			"pid:       4242\n",
			"init pid:  4241\n",
			"user:      alice (uid 1000, gid 1000)\n",
			"cmd:       python train.py --tag 'a b'\n",
			"dir:       /home/alice/exp\n",
			"gpus:      0 GPU-aaaa 12.0 GiB, util 35%\n           1 GPU-bbbb 512 MiB\n",
			"vram:      12.5 GiB\n",
			"log:       /var/log/gpusched/train.log\n",
			" (1h31m ago)\nstarted:   ",
			" (1h30m ago)\n",
		}},
		{lost, []string{
			"state:     exited (unknown)\n",
			"reason:    daemon restarted\n",
			"gpus:      -\n",
			"vram:      0 MiB\n",
			" (1m ago)\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.p.Name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]handler{api.MethodStatus: answer(result(tt.p))})
			out, errOut, code := ctl(t, d, "status", tt.p.Name)
			if code != 0 || errOut != "" {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			var p api.StatusParams
			d.params(t, api.MethodStatus, &p)
			if p.Name != tt.p.Name {
				t.Errorf("name = %q, want %q", p.Name, tt.p.Name)
			}
		})
	}
}
