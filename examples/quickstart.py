#!/usr/bin/env python3
"""The Python SDK in one page: the README's example, as a file that runs.

Against a daemon on simulated GPUs (``make demo`` runs it; or start one as the
README's "Running it" says), from the repository root after ``make build``:

    PYTHONPATH=sdk/python GPUSCHED_SOCKET=/run/gpusched/gpusched.sock python3 examples/quickstart.py
"""

import os
import shutil

from gpusched import GpuSched

sched = GpuSched()  # $GPUSCHED_SOCKET, else /run/gpusched/gpusched.sock; one persistent,
                    # thread-safe connection that reconnects after a daemon restart
model = [os.path.abspath(shutil.which("gpusched-simjob") or "bin/gpusched-simjob"), "--vram", "13000"]


def start(name):  # run a (simulated, 13 GB) model on GPU 0 and wait until it holds its memory
    sched.run(name, model, gpu=0, env=dict(os.environ))
    with sched.follow_logs(name) as lines:
        next(line for line in lines if "allocated" in line)


# Two 13 GB models do not fit together on one 24 GB GPU: start one, freeze it, start the other.
start("reward")
sched.freeze("reward")
start("policy")
for p in sched.processes(states=["running", "frozen"]):  # dataclasses; the wire object in p.raw
    print(p.name, p.state, p.vram_mib)

for step in range(3):  # RL hand-off: each activation thaws one, freezing the other to make room
    with sched.active("policy", evict=["reward"]):
        pass  # generate rollouts here
    with sched.active("reward", evict=["policy"]) as a:
        pass  # score them here
    print(f"step {step}: reward active in {a.ms['total']:.0f} ms, froze {[f.name for f in a.frozen]}")

with sched.acquire(gpus=1, min_free="4G") as lease:  # GPUs for code the daemon did not start
    lease.apply()  # sets CUDA_VISIBLE_DEVICES, only when asked
    print("leased", os.environ["CUDA_VISIBLE_DEVICES"])

for name in ("policy", "reward"):
    sched.kill(name)
    sched.rm(name)
