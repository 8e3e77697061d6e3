// Package checkpoint owns the drivers that park a CUDA process's GPU memory
// in host RAM and bring it back, one pid at a time, behind one method set
// (Driver): CLI runs NVIDIA's cuda-checkpoint tool; API keeps the CUDA
// driver library (cuCheckpointProcess*) loaded in a long-lived helper
// process, the daemon binary re-executed as "gpusched-cudahelper", so the
// driver attach is paid once; Sim moves simulated VRAM for --sim. Every
// failure is an *OpError of one class (errors.go). The CRIU disk tier and
// the snapshot store will join it. The daemon reaches it only through
// interfaces it declares itself.
package checkpoint
