package cli

import (
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// Canned daemon data shared by the tests.

func intp(n int) *int { return &n }

// proc is a running process named name.
func proc(name string) api.Process {
	now := time.Now()
	return api.Process{
		Name: name, ID: "id-" + name, State: api.StateRunning, PID: 4242, InitPID: 4241,
		UID: 1000, GID: 1000, User: "alice",
		Cmd: []string{"python", "train.py", "--tag", "a b"}, Dir: "/home/alice/exp",
		GPUs: []api.ProcessGPU{
			{Index: 0, UUID: "GPU-aaaa", UsedMiB: 12288},
			{Index: 1, UUID: "GPU-bbbb", UsedMiB: 512},
		},
		VRAMMiB:   12800,
		Tier:      api.TierGPU,
		Log:       "/var/log/gpusched/" + name + ".log",
		CreatedAt: now.Add(-91 * time.Minute),
		StartedAt: now.Add(-90*time.Minute - 30*time.Second),
	}
}

// exited is name after it ended with exit.
func exited(name string, exit api.Exit) api.Process {
	p := proc(name)
	p.State = api.StateExited
	p.PID = 0
	p.GPUs = nil
	p.VRAMMiB = 0
	p.ExitedAt = time.Now().Add(-time.Minute)
	p.Exit = &exit
	p.Tier = ""
	return p
}
