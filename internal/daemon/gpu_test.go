package daemon

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestGPUMemoryAttributedOverTree runs a simulated GPU job as a grandchild
// of the managed init and an unmanaged job beside it: the managed tree is
// charged with its grandchild's memory, the stranger with nothing.
func TestGPUMemoryAttributedOverTree(t *testing.T) {
	h := newHarness(t)
	_, err := h.client().Run(ctxT(t), api.RunParams{Name: "trainer", Dir: "/", GPU: &api.GPURef{Index: 0},
		Cmd: []string{"sh", "-c", h.bins.SimJob + " --vram 1000 --hold 0 & wait"},
		Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	h.followUntil("trainer", "simjob: allocated 1000 MiB on "+simgpu.DeviceUUID(0))

	ext := exec.Command(h.bins.SimJob, "--vram", "300", "--hold", "0")
	ext.Env = []string{"CUDA_VISIBLE_DEVICES=" + simgpu.DeviceUUID(1), "GPUSCHED_SIM_DIR=" + h.cfg.SimDir}
	out, _ := ext.StdoutPipe()
	if err := ext.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ext.Process.Kill(); ext.Wait() })
	waitLine(t, out, "simjob: allocated 300 MiB")

	if err := h.d.sampler.refresh(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	p, _ := h.client().Process(ctxT(t), "trainer")
	if p.VRAMMiB != 1000 || len(p.GPUs) != 1 || p.GPUs[0].Index != 0 || p.GPUs[0].UsedMiB != 1000 {
		t.Fatalf("trainer: vram %d, gpus %+v; want 1000 MiB on GPU 0", p.VRAMMiB, p.GPUs)
	}
	gpus, _ := h.client().GPUs(ctxT(t))
	if gpus[0].UsedMiB != 1000 || len(gpus[0].Processes) != 1 || gpus[0].Processes[0].Managed != "trainer" || gpus[0].Processes[0].PID == p.PID {
		t.Fatalf("GPU 0: %+v; want the trainer's grandchild, attributed to it", gpus[0])
	}
	if gpus[1].UsedMiB != 300 || len(gpus[1].Processes) != 1 || gpus[1].Processes[0].Managed != "" || gpus[1].Processes[0].PID != ext.Process.Pid {
		t.Fatalf("GPU 1: %+v; want the external job, unattributed", gpus[1])
	}
	st, _ := h.client().Status(ctxT(t))
	if st.GPUs[0].FreeMiB != 24576-1000 {
		t.Fatalf("status GPU 0 free %d", st.GPUs[0].FreeMiB)
	}

	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "trainer"}); err != nil {
		t.Fatal(err)
	}
	h.d.sampler.refresh(ctxT(t))
	if gpus, _ := h.client().GPUs(ctxT(t)); gpus[0].UsedMiB != 0 {
		t.Fatalf("GPU 0 still shows %d MiB after the tree was killed", gpus[0].UsedMiB)
	}
}

// waitLine reads r until a line starting with prefix.
func waitLine(t *testing.T, r interface{ Read([]byte) (int, error) }, prefix string) {
	t.Helper()
	s := bufio.NewScanner(r)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), prefix) {
			return
		}
	}
	t.Fatalf("no line starting %q", prefix)
}
