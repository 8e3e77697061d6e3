// Package mpstest owns the test stand-in for nvidia-cuda-mps-control: a
// small shell script, installed in a per-test directory, that behaves as
// the real control binary does for what the daemon uses (-d starts a
// daemon and returns at once, leaving the control pipe in
// CUDA_MPS_PIPE_DIRECTORY; "quit" on stdin stops it and removes the pipe;
// either fails while the daemon is already in that state) and records
// every call in a file beside it. It is used only by tests.
package mpstest
