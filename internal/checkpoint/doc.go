// Package checkpoint will own checkpoint and restore: the cuda-checkpoint
// driver (CLI and driver API) that parks a process's GPU memory in host RAM,
// the CRIU tier that hibernates a whole process tree to disk, and the
// snapshot store. The daemon reaches it only through interfaces it declares
// itself. Until freeze/thaw lands (issue 3) it holds no code.
package checkpoint
