package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestFreezeThawTree freezes a tree of two CUDA processes and thaws it,
// through each driver: memory leaves the GPU and comes back, the tree is
// stopped while frozen, status shows the tier, and events show every step.
func TestFreezeThawTree(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			events := make(chan api.Event, 64)
			subscribed := make(chan struct{})
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			go h.client().Events(ctx, api.EventsParams{Name: "train"}, func(e *api.Event) error {
				if e.Type == api.EventSubscribed {
					close(subscribed)
					return nil
				}
				events <- *e
				return nil
			})
			<-subscribed // no event of the run below is sent before
			h.jobs("train", 0, 1000, 500)
			if h.used(0) != 1500 {
				t.Fatalf("GPU 0 used %d before freeze, want 1500", h.used(0))
			}

			res, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "train"})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != api.StateFrozen || len(res.PIDs) != 2 || res.Bytes != 1500<<20 || res.Driver != driver {
				t.Fatalf("freeze result %+v", res)
			}
			for _, phase := range []string{"lock", "checkpoint", "stop", "total"} {
				if _, ok := res.MS[phase]; !ok {
					t.Errorf("freeze result lacks phase %q: %v", phase, res.MS)
				}
			}
			if h.used(0) != 0 || !allEqual(h.cudaStates("train"), "checkpointed") {
				t.Fatalf("after freeze: GPU 0 used %d, driver states %v", h.used(0), h.cudaStates("train"))
			}
			h.waitStopped("train", true)
			h.refresh()
			p := h.proc("train")
			if p.State != api.StateFrozen || p.Tier != api.TierHost || p.HostMiB != 1500 || p.VRAMMiB != 0 || p.FrozenAt.IsZero() {
				t.Fatalf("frozen process %+v", p)
			}
			st, _ := h.client().Status(ctxT(t))
			if st.HostMiB != 1500 || st.States[api.StateFrozen] != 1 || st.Driver != driver {
				t.Fatalf("status %+v", st)
			}

			res, err = h.client().Thaw(ctxT(t), api.ThawParams{Name: "train"})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != api.StateRunning || res.Bytes != 1500<<20 || res.MS["restore"] == 0 && res.MS["unlock"] == 0 {
				t.Fatalf("thaw result %+v", res)
			}
			if h.used(0) != 1500 || !allEqual(h.cudaStates("train"), "running") {
				t.Fatalf("after thaw: GPU 0 used %d, driver states %v", h.used(0), h.cudaStates("train"))
			}
			h.waitStopped("train", false)
			if p := h.proc("train"); p.Tier != api.TierGPU || p.HostMiB != 0 || p.VRAMMiB != 1500 {
				t.Fatalf("thawed process %+v", p)
			}

			var seq []api.State
			for len(seq) < 6 {
				e := <-events
				if e.Type == api.EventProcess {
					seq = append(seq, e.State)
				}
			}
			want := []api.State{api.StateStarting, api.StateRunning, api.StateFreezing, api.StateFrozen, api.StateThawing, api.StateRunning}
			for i := range want {
				if seq[i] != want[i] {
					t.Fatalf("events %v, want %v", seq, want)
				}
			}
		})
	}
}

// TestFreezeWrongStates refuses what cannot be frozen or thawed, changing
// nothing.
func TestFreezeWrongStates(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("a", 0, 100)
	_, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"})
	wantCode(t, err, api.CodeConflict)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
	wantCode(t, err, api.CodeConflict)
	_, err = h.client().Freeze(ctxT(t), api.FreezeParams{Name: "nope"})
	wantCode(t, err, api.CodeNotFound)
	_, err = h.client().Freeze(ctxT(t), api.FreezeParams{Name: "../x"})
	wantCode(t, err, api.CodeInvalidArgument)
	if p := h.proc("a"); p.State != api.StateFrozen || p.HostMiB != 100 {
		t.Fatalf("after refused calls: %+v", p)
	}
}

// TestKillFrozen kills a frozen (stopped) tree with the usual TERM.
func TestKillFrozen(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("a", 0, 300)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	p, err := h.client().Kill(ctxT(t), api.KillParams{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if p.State != api.StateExited || p.Exit == nil || p.Exit.Signal == "SIGKILL" {
		t.Fatalf("kill of a frozen tree: %+v exit %+v; want it ended by SIGTERM", p, p.Exit)
	}
	if st, _ := h.client().Status(ctxT(t)); st.HostMiB != 0 {
		t.Fatalf("host RAM still counts %d MiB of an exited process", st.HostMiB)
	}
}

// TestThawAdmission thaws only when the GPU has room: at once or not at
// all without a timeout, after a wait with one, and never past it.
func TestThawAdmission(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.ThawMarginMiB = 100 })
	h.jobs("big", 0, 3000)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "big"}); err != nil {
		t.Fatal(err)
	}
	h.jobs("squatter", 0, 1000) // 4096 - 1000 < 3000 + 100

	_, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "big"})
	wantCode(t, err, api.CodeResourceExhausted)
	_, err = h.client().Thaw(ctxT(t), api.ThawParams{Name: "big", Timeout: api.Duration(50 * time.Millisecond)})
	wantCode(t, err, api.CodeTimeout)
	if p := h.proc("big"); p.State != api.StateFrozen {
		t.Fatalf("refused thaw changed the state to %s", p.State)
	}

	done := make(chan error, 1)
	go func() {
		_, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "big", Timeout: api.Duration(time.Minute)})
		done <- err
	}()
	waitFor(t, func() bool { return h.d.thaws.Waiting() > 0 })
	if p := h.proc("big"); p.State != api.StateFrozen {
		t.Fatalf("waiting thaw changed the state to %s", p.State)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "squatter"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("thaw after memory freed: %v", err)
	}
	if p := h.proc("big"); p.State != api.StateRunning || h.used(0) != 3000 {
		t.Fatalf("after admitted thaw: %s, GPU 0 used %d", p.State, h.used(0))
	}
}

// TestConcurrentThawsShareFreeMemory admits two thaws that do not both fit
// one at a time: the second waits for room rather than oversubscribing.
func TestConcurrentThawsShareFreeMemory(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	for _, n := range []string{"a", "b"} {
		h.jobs(n, 0, 2500)
		if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for _, n := range []string{"a", "b"} {
		go func() {
			_, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: n})
			errs <- err
		}()
	}
	var ok, exhausted int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case api.CodeOf(err) == api.CodeResourceExhausted:
			exhausted++
		default:
			t.Fatal(err)
		}
	}
	if ok != 1 || exhausted != 1 || h.used(0) != 2500 {
		t.Fatalf("%d thawed, %d refused, GPU 0 used %d; want one of each and 2500 MiB", ok, exhausted, h.used(0))
	}
}

// TestRAMBudget refuses a freeze that would hold more host RAM than
// --ram-budget when the disk tier is off (nothing can be evicted), leaving
// the process running.
func TestRAMBudget(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.RAMBudgetMiB, c.CRIU = 2000, "none" })
	h.jobs("a", 0, 1500)
	h.jobs("b", 1, 1000)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "b"})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "disk tier") {
		t.Fatalf("error does not say why nothing was evicted: %v", err)
	}
	if p := h.proc("b"); p.State != api.StateRunning || h.used(1) != 1000 || !allEqual(h.cudaStates("b"), "running") {
		t.Fatalf("refused freeze left b %s, GPU 1 used %d", p.State, h.used(1))
	}
	st, _ := h.client().Status(ctxT(t))
	if st.HostMiB != 1500 || st.RAMBudgetMiB != 2000 {
		t.Fatalf("status host %d budget %d", st.HostMiB, st.RAMBudgetMiB)
	}
}

// TestSwap swaps concurrently when both fit, in sequence when they do not,
// through each driver.
func TestSwap(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("reward", 0, 1000)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "reward"}); err != nil {
				t.Fatal(err)
			}
			h.jobs("policy", 0, 1000)
			res, err := h.client().Swap(ctxT(t), api.SwapParams{Freeze: "policy", Thaw: "reward"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Concurrent || res.Freeze.State != api.StateFrozen || res.Thaw.State != api.StateRunning {
				t.Fatalf("swap when both fit: %+v", res)
			}

			h.jobs("huge", 1, 3000)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "huge"}); err != nil {
				t.Fatal(err)
			}
			h.jobs("other", 1, 3000)
			res, err = h.client().Swap(ctxT(t), api.SwapParams{Freeze: "other", Thaw: "huge"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Concurrent || h.proc("other").State != api.StateFrozen || h.proc("huge").State != api.StateRunning || h.used(1) != 3000 {
				t.Fatalf("swap when they do not fit: %+v", res)
			}
		})
	}
}

// TestSwapThawFailureThawsBack thaws the frozen side back when the other
// side cannot be thawed.
func TestSwapThawFailureThawsBack(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("off", 0, 1000)
	h.jobs("on", 1, 1000)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "on"}); err != nil {
		t.Fatal(err)
	}
	h.jobs("squatter", 1, 3500)
	_, err := h.client().Swap(ctxT(t), api.SwapParams{Freeze: "off", Thaw: "on"})
	wantCode(t, err, api.CodeResourceExhausted)
	if p := h.proc("off"); p.State != api.StateRunning || h.used(0) != 1000 {
		t.Fatalf("after failed swap: off is %s, GPU 0 used %d; want running again", p.State, h.used(0))
	}
	if p := h.proc("on"); p.State != api.StateFrozen {
		t.Fatalf("after failed swap: on is %s", p.State)
	}
}

// TestMigrate moves a running and a frozen process to the other GPU.
func TestMigrate(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 1200)
			res, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != api.StateRunning || len(res.GPUs) != 1 || res.GPUs[0] != simgpu.DeviceUUID(1) {
				t.Fatalf("migrate result %+v", res)
			}
			if h.used(0) != 0 || h.used(1) != 1200 {
				t.Fatalf("after migrate GPU 0 %d, GPU 1 %d", h.used(0), h.used(1))
			}
			h.refresh()
			if p := h.proc("a"); len(p.GPUs) != 1 || p.GPUs[0].Index != 1 || p.GPUs[0].UsedMiB != 1200 {
				t.Fatalf("migrated process GPUs %+v", p.GPUs)
			}

			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPUs: []api.GPURef{{Index: 0}}}); err != nil {
				t.Fatal(err)
			}
			if h.used(0) != 1200 || h.proc("a").State != api.StateRunning {
				t.Fatalf("frozen migrate: GPU 0 %d, state %s", h.used(0), h.proc("a").State)
			}

			_, err = h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 0}})
			wantCode(t, err, api.CodeConflict)
			_, err = h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 7}})
			wantCode(t, err, api.CodeInvalidArgument)
			_, err = h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a"})
			wantCode(t, err, api.CodeInvalidArgument)
		})
	}
}

// TestMigrateWithoutDeviceMap answers unavailable, before touching the
// process, when the installed tool cannot restore onto other GPUs.
func TestMigrateWithoutDeviceMap(t *testing.T) {
	h := prepareCkpt(t, config.DriverCLI)
	h.faults(`{"help": {"no_device_map": true}}`)
	h.begin()
	h.jobs("a", 0, 500)
	_, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 1}})
	wantCode(t, err, api.CodeUnavailable)
	if p := h.proc("a"); p.State != api.StateRunning || h.used(0) != 500 {
		t.Fatalf("refused migrate left %s, GPU 0 %d", p.State, h.used(0))
	}
	hello, _ := h.client().Hello(ctxT(t))
	for _, c := range hello.Capabilities {
		if c == api.CapMigrate {
			t.Fatalf("hello offers migrate without a device map: %v", hello.Capabilities)
		}
	}
}

// waitFor polls cond (an in-process condition with no event to await).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
