package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDriverWarning570: on a 570 driver (its tool's --help; its libcuda's
// CUDA 12.8) hello and gpus carry the known PyTorch failure
// (NVIDIA/cuda-checkpoint#34); on the default 580 fake they carry nothing.
func TestDriverWarning570(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := prepareCkpt(t, driver)
			if driver == config.DriverCLI {
				h.faults(`{"help": {"no_device_map": true}}`)
			} else {
				t.Setenv("FAKE_LIBCUDA_VERSION", "12080") // read by the fake libcuda in the helper
			}
			h.begin()
			hello, err := h.client().Hello(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(hello.DriverWarning, "NVIDIA/cuda-checkpoint#34") {
				t.Errorf("hello driver_warning %q, want the #34 warning", hello.DriverWarning)
			}
			if slices.Contains(hello.Capabilities, api.CapMigrate) {
				t.Errorf("capabilities %v offer migrate on a driver without device maps", hello.Capabilities)
			}
			gpus, err := h.client().GPUs(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gpus {
				if g.DriverWarning != hello.DriverWarning {
					t.Errorf("GPU %d driver_warning %q, want hello's", g.Index, g.DriverWarning)
				}
			}
		})
	}
	h := newCkptHarness(t, config.DriverCLI)
	hello, err := h.client().Hello(ctxT(t))
	if err != nil || hello.DriverWarning != "" || !slices.Contains(hello.Capabilities, api.CapMigrate) {
		t.Errorf("driver 580: hello %+v, %v; want migrate and no warning", hello, err)
	}
}

// TestMigrateRejectedMap: a driver refusing the device map ("invalid
// argument" on a restore with GPU pairs, NVIDIA/cuda-checkpoint#35) is a
// refused request, and the process runs on where it was.
func TestMigrateRejectedMap(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 500)
			h.faults(`{"restore": {"error": "CUDA_ERROR_INVALID_VALUE", "times": 1}}`)
			_, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 1}})
			wantCode(t, err, api.CodeInvalidArgument)
			if !strings.Contains(err.Error(), "thawed back on its old GPUs") {
				t.Errorf("error %v does not say the process was thawed back", err)
			}
			if p := h.proc("a"); p.State != api.StateRunning || h.used(0) != 500 || h.used(1) != 0 {
				t.Fatalf("after the refused map: %s, GPU 0 %d MiB, GPU 1 %d MiB", p.State, h.used(0), h.used(1))
			}
		})
	}
}
