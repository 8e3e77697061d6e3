"""freeze, thaw, swap and migrate against a real gpuschedd on two simulated GPUs,
with the simulated checkpoint driver (the default under --sim)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Callable, Union

import pytest

from gpusched import (
    CheckpointResult,
    Conflict,
    GpuSched,
    InvalidArgument,
    NotFound,
    Process,
    ResourceExhausted,
    SwapResult,
    Timeout,
)
from conftest import SimJob
from harness import guarded

GPU0 = "GPU-5a1d0000-0000-4000-8000-000000000000"
GPU1 = "GPU-5a1d0000-0000-4000-8000-000000000001"
MiB = 1 << 20

def is_aware(value: Union[datetime, None]) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def proc_state(pid: int) -> str:
    """The kernel's one-letter state of pid ("T" when stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_freeze_thaw_without_cuda(sched: GpuSched) -> None:
    started = sched.run("policy", ["sleep", "1000"], gpu=0)
    assert (started.tier, started.host_mib, started.frozen_at, started.error) == ("gpu", 0, None, "")

    frozen = sched.freeze("policy")
    assert isinstance(frozen, CheckpointResult)
    assert (frozen.name, frozen.op, frozen.state, frozen.driver) == ("policy", "freeze", "frozen", "sim")
    assert (frozen.pids, frozen.bytes, frozen.mib, frozen.gpus) == ([], 0, 0, [GPU0])  # no CUDA process: only stopped
    assert {"lock", "checkpoint", "stop", "total"} <= set(frozen.ms) and frozen.ms["total"] >= 0

    process = sched.status("policy")
    assert (process.state, process.tier, process.host_mib, process.pid) == ("frozen", "host", 0, started.pid)
    assert is_aware(process.frozen_at)
    assert proc_state(started.pid) == "T"
    status = sched.status()
    assert (status.states, status.driver, status.ram_budget_mib) == ({"frozen": 1}, "sim", 0)

    thawed = sched.thaw("policy", timeout=10.0)
    assert (thawed.name, thawed.op, thawed.state, thawed.gpus) == ("policy", "thaw", "running", [GPU0])
    assert {"admit", "restore", "unlock", "total"} <= set(thawed.ms)
    process = sched.status("policy")
    assert (process.state, process.tier, process.frozen_at) == ("running", "gpu", None)
    assert proc_state(started.pid) != "T"


def test_freeze_without_stop(sched: GpuSched) -> None:
    started = sched.run("policy", ["sleep", "1000"], gpu=0)
    assert "stop" not in sched.freeze("policy", lock_timeout=2.5, stop=False).ms
    assert sched.status("policy").state == "frozen"
    assert proc_state(started.pid) != "T"
    assert sched.thaw("policy").state == "running"


def test_freeze_thaw_gpu_job(sched: GpuSched, simjob: SimJob) -> None:
    job = simjob("train", 500)

    frozen = sched.freeze("train")
    assert (frozen.state, frozen.pids, frozen.bytes, frozen.mib, frozen.gpus) == ("frozen", [job.pid], 500 * MiB, 500, [GPU0])
    process = sched.status("train")
    assert (process.state, process.tier, process.host_mib) == ("frozen", "host", 500)
    status = sched.status()
    assert (status.host_mib, status.states) == (500, {"frozen": 1})

    thawed = sched.thaw("train")
    assert (thawed.op, thawed.state, thawed.pids, thawed.bytes, thawed.gpus) == ("thaw", "running", [job.pid], 500 * MiB, [GPU0])
    process = sched.status("train")
    assert (process.state, process.tier, process.host_mib, process.vram_mib) == ("running", "gpu", 0, 500)
    assert sched.status().host_mib == 0
    gpu = sched.gpus()[0]
    assert gpu.used_mib == 500 and [(p.pid, p.managed) for p in gpu.processes] == [(job.pid, "train")]


def test_thaw_that_does_not_fit(sched: GpuSched, simjob: SimJob) -> None:
    simjob("big", 20000)
    sched.freeze("big")
    simjob("squatter", 10000)

    with pytest.raises(ResourceExhausted) as exhausted:
        sched.thaw("big")
    assert exhausted.value.code == "resource_exhausted" and "pass a timeout" in str(exhausted.value)
    with pytest.raises(Timeout) as timeout:
        sched.thaw("big", timeout=0.2)  # float seconds: the daemon waited, then gave up
    assert timeout.value.code == "timeout" and "waited 200ms" in str(timeout.value)
    assert sched.status("big").state == "frozen"

    sched.kill("squatter")
    assert sched.thaw("big", timeout=10).state == "running"


def test_swap(sched: GpuSched, simjob: SimJob) -> None:
    policy = simjob("policy", 500)
    reward = simjob("reward", 700)
    sched.freeze("reward")

    swapped = sched.swap("policy", "reward")  # freeze policy, thaw reward
    assert isinstance(swapped, SwapResult)
    assert swapped.concurrent  # reward fits beside policy
    assert (swapped.freeze.name, swapped.freeze.op, swapped.freeze.state, swapped.freeze.pids) == ("policy", "freeze", "frozen", [policy.pid])
    assert (swapped.thaw.name, swapped.thaw.op, swapped.thaw.state, swapped.thaw.bytes) == ("reward", "thaw", "running", 700 * MiB)
    assert swapped.ms["total"] >= 0
    assert (sched.status("policy").tier, sched.status("reward").tier) == ("host", "gpu")
    assert sched.status().states == {"frozen": 1, "running": 1}

    back = sched.swap("reward", "policy", timeout=5.0)
    assert (back.freeze.name, back.thaw.name, back.thaw.pids) == ("reward", "policy", [policy.pid])
    assert (sched.status("policy").state, sched.status("reward").state) == ("running", "frozen")
    assert reward.pid == sched.status("reward").pid

    with pytest.raises(Conflict, match='"reward" is frozen; only a running process can be frozen'):
        sched.swap("reward", "policy")  # the wrong way round
    assert (sched.status("policy").state, sched.status("reward").state) == ("running", "frozen")


def test_swap_one_at_a_time_when_both_do_not_fit(sched: GpuSched, simjob: SimJob) -> None:
    simjob("reward", 15000)
    sched.freeze("reward")
    simjob("policy", 15000)
    swapped = sched.swap("policy", "reward")
    assert not swapped.concurrent
    assert (swapped.freeze.state, swapped.thaw.state) == ("frozen", "running")
    assert sched.status("reward").vram_mib == 15000


def test_migrate(sched: GpuSched, simjob: SimJob) -> None:
    job = simjob("train", 500)

    moved = sched.migrate("train", 1)
    assert (moved.name, moved.op, moved.state, moved.pids, moved.bytes, moved.gpus) == ("train", "migrate", "running", [job.pid], 500 * MiB, [GPU1])
    process = sched.status("train")
    assert (process.state, process.tier) == ("running", "gpu")
    assert [(g.index, g.uuid, g.used_mib) for g in process.gpus] == [(1, GPU1, 500)]
    gpus = sched.gpus()
    assert (gpus[0].used_mib, gpus[1].used_mib) == (0, 500)

    with pytest.raises(Conflict, match="already on those GPUs"):
        sched.migrate("train", GPU1)

    sched.freeze("train")
    moved = sched.migrate("train", GPU0, timeout=5)  # a frozen process too, by UUID; it ends running
    assert (moved.state, moved.gpus) == ("running", [GPU0])
    assert [g.index for g in sched.status("train").gpus] == [0]

    assert sched.migrate("train", [1]).gpus == [GPU1]  # the list form, one target per current GPU
    with pytest.raises(InvalidArgument, match="one target per GPU"):
        sched.migrate("train", [0, 1])


def test_checkpoint_errors(sched: GpuSched) -> None:
    with pytest.raises(NotFound) as not_found:
        sched.freeze("ghost")
    assert (not_found.value.code, str(not_found.value)) == ("not_found", 'process "ghost" not found')
    with pytest.raises(NotFound):
        sched.thaw("ghost")
    with pytest.raises(NotFound):
        sched.migrate("ghost", 1)
    with pytest.raises(NotFound):
        sched.swap("ghost", "other")

    sched.run("policy", ["sleep", "1000"], gpu=0)
    with pytest.raises(Conflict) as conflict:
        sched.thaw("policy")
    assert (conflict.value.code, str(conflict.value)) == ("conflict", 'process "policy" is already running')
    with pytest.raises(InvalidArgument, match="same process"):
        sched.swap("policy", "policy")
    with pytest.raises(InvalidArgument):
        sched.freeze("policy", lock_timeout=-1)

    sched.freeze("policy")
    with pytest.raises(Conflict, match="already frozen"):
        sched.freeze("policy")

    sched.run("done", ["true"])
    sched.wait("done")
    assert sched.status("done").tier == ""  # exited: no tier
    with pytest.raises(Conflict, match="only a running process can be frozen"):
        sched.freeze("done")
