#!/usr/bin/env python3
"""GPU workload for scripts/gpu-check.sh.

Allocates --gb GiB on the GPU as 256 MiB float32 tensors, each filled with a
deterministic pattern computed on the GPU, prints "READY <pid> <gb>" and then
idles (with --busy: multiplies 2048x2048 matrices without pause). On SIGUSR1
it recomputes every tensor's pattern and compares, printing "VERIFY OK <n>
tensors" or "VERIFY FAIL tensor <i>". SIGTERM ends it with status 0. All CUDA
work happens in the main thread: the signal handlers only set flags, which
the loop checks every 50 ms (every few ms with --busy). The dry run's
stand-in, gpusched-simjob --gpu-check, speaks the same protocol (--busy is
its --util 60): change both together.
"""

import argparse
import os
import signal
import sys
import time

import torch

TENSOR_MIB = 256
ELEMS = TENSOR_MIB * (1 << 20) // 4  # float32 elements per tensor
MODULUS = 16777213  # < 2**24: every value is an integer float32 holds exactly

verify_requested = False
stop_requested = False


def on_usr1(_signum, _frame):
    global verify_requested
    verify_requested = True


def on_term(_signum, _frame):
    global stop_requested
    stop_requested = True


def pattern(i, device):
    """Tensor i's contents: ((k * 7 + i * 131) mod MODULUS) for element k."""
    x = torch.arange(ELEMS, dtype=torch.int32, device=device)
    x.mul_(7).add_(i * 131).remainder_(MODULUS)
    return x.to(torch.float32)


def verify(tensors):
    try:
        for i, t in enumerate(tensors):
            if not torch.equal(t, pattern(i, t.device)):
                return "VERIFY FAIL tensor %d" % i
        torch.cuda.synchronize()
    except Exception as e:  # a CUDA error after a bad restore is a failure too
        return "VERIFY FAIL error: %s" % str(e).splitlines()[0]
    return "VERIFY OK %d tensors" % len(tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, required=True, help="GiB to allocate (multiple of 0.25)")
    ap.add_argument("--busy", action="store_true", help="keep the GPU busy once READY (the util phase)")
    args = ap.parse_args()
    n = max(1, round(args.gb * 1024 / TENSOR_MIB))

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    if not torch.cuda.is_available():
        print("VERIFY FAIL error: torch.cuda.is_available() is False", flush=True)
        return 1
    device = torch.device("cuda", 0)
    t0 = time.monotonic()
    tensors = [pattern(i, device) for i in range(n)]
    torch.cuda.synchronize()
    print("allocated %d x %d MiB on %s in %.1f s" % (
        n, TENSOR_MIB, torch.cuda.get_device_name(device), time.monotonic() - t0), flush=True)
    print("READY %d %g" % (os.getpid(), args.gb), flush=True)  # the pid in its own PID namespace

    global verify_requested
    work = torch.ones(2048, 2048, device=device) if args.busy else None
    while not stop_requested:
        if verify_requested:
            verify_requested = False
            print(verify(tensors), flush=True)
        if work is None:
            time.sleep(0.05)
            continue
        for _ in range(20):  # a few ms of work a round, so that the flags are seen
            torch.mm(work, work)
        torch.cuda.synchronize()
    print("stopping on SIGTERM", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
