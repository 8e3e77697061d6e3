// Package mps owns NVIDIA's Multi-Process Service on behalf of the daemon:
// the one MPS control daemon (nvidia-cuda-mps-control) of the machine that
// the daemon's MPS clients connect to, and the environment that makes a
// managed process such a client.
//
// The control binary is looked up once, when the Manager is built (on the
// daemon's PATH, or at a configured path). Without it every request for MPS
// attributes is refused with ErrUnavailable and nothing is started.
//
// The control daemon runs only while there are clients: Acquire starts it
// (nvidia-cuda-mps-control -d) before the first client launches, and the
// Release of the last client stops it (quit on the control's stdin), in the
// background so that Release never blocks. Both run through execx with
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY set to the Manager's
// own directories (0755), so that it never meddles with an MPS instance
// someone else started. Clients are counted by process record id; after a
// daemon restart, Adopt takes the live clients from the process table (and
// stops a control daemon that no client needs any more).
//
// Package mpstest holds the fake control binary the tests run.
package mps
