// Package gpu owns GPU discovery and sampling behind one data model: the NVML
// backend reads real devices through the NVIDIA driver, and the simulated
// backend reads the simgpu registry that simulated jobs update, so the daemon
// runs the same code paths with or without a GPU. It also parses the --sim
// flag's value.
package gpu
