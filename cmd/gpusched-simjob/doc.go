// Command gpusched-simjob is a simulated GPU job: a real process that holds
// simulated VRAM in the simgpu registry, so that placement, attribution,
// freeze/thaw and OOM handling run for real without a GPU.
//
// It finds the sim directory in GPUSCHED_SIM_DIR and its GPUs in
// CUDA_VISIBLE_DEVICES (UUIDs, or indices into gpus.json), registers under
// its host pid as NVML would report it, in its user's own record directory
// (which the daemon makes when it starts a process for the user), grows to
// --vram MiB on each GPU
// (over --ramp seconds), holds it for --hold seconds (0: until killed) and
// exits with --exit-code. On a full GPU it prints PyTorch's out-of-memory
// line and exits 1; --oom-once does so once, keyed by a marker file. Its
// first allocation starts its CUDA restore thread, as cuInit does
// (internal/simgpu), which a restore needs running. While a
// (fake) cuda-checkpoint holds it locked or checkpointed, its allocations
// wait and retry every few milliseconds, as CUDA calls block, and signals are
// still handled.
// As an MPS client (the daemon's mps attributes), it prints
// "simjob: mps threads=N" when CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is set, and
// registers CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=4096M,1=4096M", by device
// ordinal: position in CUDA_VISIBLE_DEVICES) as its own cap per GPU before
// allocating, so that an allocation past it fails with the out-of-memory
// line, as an MPS server enforces it.
// --cycles N frees everything after each hold, waits --hold seconds and ramps
// again, N more times ("simjob: freed all VRAM, cycle K of N"): a process
// that frees and re-allocates, as an RL phase change does.
// --util P keeps its GPUs busy P% of the time while it holds memory: the
// simulated GPUs report that as their utilization (the sum over their
// processes), as NVML measures a real one, so that idle policies and
// utilization filters see a working job as busy; without it a job only holds
// memory and its GPUs show 0%.
// --host-mem fills real host memory with a pattern verified every second and
// on SIGUSR1 (exit 3 on corruption), and --tick prints an in-memory counter:
// both show that a checkpointed and restored process kept its memory.
// --ticks N ends it after N ticks: a fixed amount of work, since a stopped
// (frozen) process does not tick, and with --vram a locked one counts none.
// --gpu-check makes it the stand-in for scripts/gpu-check/workload.py in the
// hardware check's dry run: "READY <pid> <GiB>" once allocated, and one
// "VERIFY OK|FAIL ..." line per SIGUSR1 (host memory, CUDA state, VRAM).
//
// --nccl GROUP joins a simulated NCCL group (whose members' locks wait for
// each other, as NVIDIA/cuda-checkpoint#30 hangs) and maps what a process
// of an NCCL communicator maps: a file named libnccl.so.2 and, unless
// --nccl-shm=false, a /dev/shm/nccl-* segment; --uvm maps a file named
// nvidia-uvm, as a process with managed memory maps /dev/nvidia-uvm. Each
// file is unlinked once mapped.
//
// --http PORT makes it a fake OpenAI-compatible model server on
// 127.0.0.1:PORT, for the router's tests (http.go): /health answers 503
// {"status":"loading model"} until it holds --vram and --load-seconds have
// passed (its VRAM ramps over them, as weights load), then 200
// {"status":"ok"}, as llama.cpp's server does; /v1/models,
// /v1/chat/completions (streamed as server-sent events with "stream":
// true), /v1/completions and /v1/embeddings answer deterministic content
// naming --model (default: the process name). Bodies are bounded to 1 MiB.
// --token-delay spaces streamed tokens; --parallel N generates for at most
// N requests at once, the others waiting first come, first served, as
// llama-server's slots do, and GET /slots and GET /props (its total_slots)
// tell them as llama-server's do; a message or prompt "CRASH" makes
// it exit 70 mid-response. A request waits while the simulated driver holds
// the process locked or checkpointed, as its CUDA calls would. With
// $LLAMA_API_KEY set, every path but /health, /v1/health, /models and
// /v1/models asks for it, as llama-server does.
//
// Progress goes to stdout one line at a time ("simjob: pid=...",
// "simjob: allocated N MiB on GPU-...", "simjob: done, exiting with N").
// SIGTERM and SIGINT print "simjob: SIGTERM with CUDA <state>" (its CUDA
// checkpoint state then, "none" without GPU memory), release the memory,
// then kill the job by that signal.
// Usage errors exit 2.
package main
