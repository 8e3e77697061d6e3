// Package cudakind tells, from a process's memory map (/proc/PID/maps, read
// bounded), the kinds of CUDA process that NVIDIA's checkpoint driver
// cannot checkpoint: a rank of an NCCL communicator that shares memory with
// other processes, and a process with managed (UVM) memory. It reads
// nothing else and changes nothing.
package cudakind
