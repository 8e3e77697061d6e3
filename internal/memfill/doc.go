// Package memfill owns the GPU memory-reservation filler: one helper
// process per GPU (the daemon binary re-executed as "gpusched-filler",
// never the daemon itself) that holds device memory in fixed chunks so that
// the GPU's total usage stays at a target while a requested reserve is kept
// free for hand-overs to the daemon's jobs.
//
// The helper's control loop (loop.go) applies a pure policy (policy.go)
// every tick over a tiny backend interface: simulated VRAM in a simgpu
// registry (sim.go) or the CUDA driver API through purego (cuda.go). The
// daemon drives it with JSON lines (proto.go) through a Filler (client.go):
// first over the child's stdin and stdout, then, once the daemon is gone
// and back, over the helper's rendezvous Unix socket (Adopt). A helper
// outlives its daemon, keeps holding with its last parameters, and releases
// everything and exits when no controller has adopted it for a while.
package memfill
