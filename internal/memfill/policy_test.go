package memfill

import "testing"

func TestPlan(t *testing.T) {
	const total, chunk = 24576, 256
	tests := []struct {
		name            string
		target, reserve uint64
		free            uint64
		held            int
		want            int
	}{
		{"empty device grows to within a chunk of the target", 23347, 0, 24576, 0, 91},
		{"settled: free between F and F+chunk", 23347, 0, 1229 + 255, 91, 0},
		{"settled exactly at F", 23347, 0, 1229, 91, 0},
		{"one chunk above F grows one", 23347, 0, 1229 + 256, 91, 1},
		{"just below F releases one", 23347, 0, 1228, 91, -1},
		{"a 512 MiB allocation elsewhere releases two", 23347, 0, 1229 + 100 - 512, 91, -2},
		{"a 4 GiB allocation elsewhere releases sixteen", 20480, 0, 4096 + 100 - 4096, 80, -16},
		{"short by exactly two chunks", 20480, 0, 4096 - 512, 50, -2},
		{"release capped at what it holds", 20480, 0, 0, 3, -3},
		{"nothing held, nothing to release", 20480, 0, 0, 0, 0},
		{"reserve hands over", 20480, 8192, 4096, 80, -32},
		{"reserve hand-over rounds up", 20480, 8000, 4096, 80, -32},
		{"reserve lowered grows back", 20480, 0, 4096 + 8192, 48, 32},
		{"target above total holds everything", 1 << 40, 0, 1000, 0, 3},
		{"target equal to total", total, 0, total, 0, total / chunk},
		{"target zero releases everything", 0, 0, total - 94*chunk, 94, -94},
		{"reserve larger than the device releases everything", 20480, 1 << 40, 4096, 80, -80},
		{"reserve at the maximum does not overflow", 20480, ^uint64(0), 4096, 80, -80},
		{"free above total (racing reads) still bounded", 0, 0, total + 10, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(params{targetMiB: tt.target, reserveMiB: tt.reserve}, tt.free, total, tt.held, chunk)
			if got != tt.want {
				t.Errorf("plan(target %d, reserve %d, free %d, held %d) = %d, want %d", tt.target, tt.reserve, tt.free, tt.held, got, tt.want)
			}
		})
	}
}

// TestPlanSettles checks the invariant the policy exists for: starting
// from any hold and any usage by others, one pass leaves the device's
// usage within one chunk below the target whenever the filler can reach it.
func TestPlanSettles(t *testing.T) {
	const total, chunk = 24576, 256
	for _, target := range []uint64{0, 1000, 12288, 23347, total, total + 5} {
		for _, other := range []uint64{0, 700, 4096, 20000, total} {
			for _, held := range []int{0, 10, 50, 96} {
				used := other + uint64(held)*chunk
				if used > total {
					continue
				}
				n := plan(params{targetMiB: target}, total-used, total, held, chunk)
				after := int64(used) + int64(n)*chunk
				tgt := int64(min(target, total))
				if held+n < 0 {
					t.Fatalf("target %d other %d held %d: releases %d", target, other, held, -n)
				}
				if canReach := int64(other) <= tgt; canReach && (after > tgt || after <= tgt-chunk) {
					t.Errorf("target %d other %d held %d: usage %d after the pass, want (%d, %d]", target, other, held, after, tgt-chunk, tgt)
				}
			}
		}
	}
}

func TestHelperTarget(t *testing.T) {
	for _, tt := range []struct {
		name                string
		target, gpu, helper uint64
		want                uint64
	}{
		// Measured on an H200, driver 580.159.04: NVML 143771 MiB,
		// cuMemGetInfo 143155 MiB; fill --ratio 0.9 is 129393 MiB.
		{"H200 at 0.9", 129393, 143771, 143155, 128777},
		{"same totals", 20480, 24576, 24576, 20480},
		{"helper total unknown", 20480, 24576, 0, 20480},
		{"helper total above NVML's", 20480, 24576, 30000, 20480},
		{"target below the reserve", 500, 143771, 143155, 0},
		{"target zero", 0, 143771, 143155, 0},
	} {
		if got := HelperTarget(tt.target, tt.gpu, tt.helper); got != tt.want {
			t.Errorf("%s: HelperTarget(%d, %d, %d) = %d, want %d", tt.name, tt.target, tt.gpu, tt.helper, got, tt.want)
		}
	}
}

// TestHelperTargetSettles: a helper whose backend leaves the driver's
// reserve out of its total, given HelperTarget, holds the GPU's usage as
// NVML counts it within one chunk below the target, wherever others leave
// it the room.
func TestHelperTargetSettles(t *testing.T) {
	const nvmlTotal, chunk = 143771, 256
	for _, reserved := range []uint64{0, 616, 1000} {
		cudaTotal := uint64(nvmlTotal) - reserved
		for _, target := range []uint64{4096, 71885, 129393, 136582} {
			for _, other := range []uint64{0, 4096, 30000} {
				if reserved+other > target {
					continue // out of the filler's reach: it holds nothing
				}
				p := params{targetMiB: HelperTarget(target, nvmlTotal, cudaTotal)}
				held := 0
				for range 3 { // settles in one pass; later passes hold
					free := cudaTotal - other - uint64(held)*chunk
					held += plan(p, free, cudaTotal, held, chunk)
				}
				used := reserved + other + uint64(held)*chunk // NVML's used
				if used > target || used+chunk <= target {
					t.Errorf("reserved %d target %d other %d: NVML sees %d MiB used, want (%d, %d]", reserved, target, other, used, target-chunk, target)
				}
			}
		}
	}
}
