// Package routerbench holds BenchmarkRouter (make bench): time to first
// byte through gpusched-router for a frozen, a hibernated and a cold model,
// the same swap done by kill-and-restart as llama-swap does it, the
// router's own latency over the daemon's activate, and proxied requests/s
// against direct ones. It runs a real gpuschedd on simulated GPUs, the real
// router binary as an unprivileged user and gpusched-simjob --http as the
// model servers, over real HTTP. It has no code outside its test.
package routerbench
