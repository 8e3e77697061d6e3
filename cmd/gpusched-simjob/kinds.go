package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// shmDir is where NCCL creates its shared-memory segments.
const shmDir = "/dev/shm"

// mapKinds makes the job look, in /proc/PID/maps and to the simulated
// driver, like the kinds of CUDA process its flags name:
//
//   - --nccl GROUP joins the simulated NCCL group (simgpu.SetNCCL, whose
//     lock waits as NVIDIA/cuda-checkpoint#30 hangs), maps a file named
//     libnccl.so.2 as a process that loaded NCCL does, and with --nccl-shm a
//     segment /dev/shm/nccl-XXXXXX, as NCCL's shared-memory transport and
//     proxy do (NCCL src/misc/shmutils.cc, ncclShmOpen: mkstemp on
//     "/dev/shm/nccl-XXXXXX", mmap MAP_SHARED, then unlink once its peers
//     attached).
//   - --uvm maps a file named nvidia-uvm, as a process with managed memory
//     maps /dev/nvidia-uvm (open-gpu-kernel-modules,
//     kernel-open/nvidia-uvm/uvm.c, uvm_mmap: a managed range is an mmap of
//     the UVM file at its own address).
//
// Every file is unlinked once mapped, as NCCL unlinks its segments, so
// the maps name them "(deleted)" and nothing is left behind.
func (j *job) mapKinds() error {
	if j.cfg.nccl != "" {
		if err := j.vram.reg.SetNCCL(j.vram.pid, j.vram.start, j.cfg.nccl); err != nil {
			return err
		}
		if err := mapNamed("", "libnccl.so.2"); err != nil {
			return err
		}
		if j.cfg.ncclShm {
			if err := mapNamed(shmDir, "nccl-"); err != nil {
				return err
			}
		}
		j.printf("simjob: NCCL group %s", j.cfg.nccl)
	}
	if j.cfg.uvm {
		if err := mapNamed("", "nvidia-uvm"); err != nil {
			return err
		}
	}
	return nil
}

// mapNamed maps one page of a new file and unlinks it. With dir set, the
// file is dir/<prefix><random>; without, it is <prefix> in a private
// temporary directory.
func mapNamed(dir, prefix string) error {
	var f *os.File
	var err error
	if dir != "" {
		f, err = os.CreateTemp(dir, prefix)
	} else {
		var tmp string
		if tmp, err = os.MkdirTemp("", "simjob-map-"); err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		f, err = os.Create(filepath.Join(tmp, prefix))
	}
	if err != nil {
		return fmt.Errorf("map a file named %s: %w", prefix, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := unix.Getpagesize()
	if err := f.Truncate(int64(page)); err != nil {
		return err
	}
	// The mapping lives as long as the process.
	if _, err := unix.Mmap(int(f.Fd()), 0, page, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return nil
}

// cudaState is the job's CUDA checkpoint state as the simulated driver has
// it; "none" without a record.
func (j *job) cudaState() string {
	if j.vram == nil {
		return "none"
	}
	j.vram.follow()
	state, err := j.vram.reg.CheckpointState(j.vram.pid)
	if err != nil {
		return "none"
	}
	return state
}
