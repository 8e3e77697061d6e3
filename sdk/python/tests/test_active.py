"""sched.active(): the RL hand-off, the daemon's activate, against a real gpuschedd on simulated 24 GiB GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SimJob
from gpusched import Activation, Conflict, GpuSched, NotFound, ResourceExhausted
from harness import REPO_ROOT, Daemon, guarded


def states(sched: GpuSched) -> dict:
    return {p.name: p.state for p in sched.processes()}


def test_alternating_hand_off(sched: GpuSched, simjob: SimJob) -> None:
    simjob("reward", 16000)
    sched.freeze("reward")
    simjob("policy", 16000)

    with sched.active("policy") as activation:
        assert isinstance(activation, Activation)
        assert (activation.was, activation.thaw, activation.frozen, activation.held) == ("running", None, [], True)
        assert set(activation.ms) == {"total"}

    for _ in range(3):
        with sched.active("reward") as activation:  # both do not fit: policy is swapped out in one call
            assert activation.was == "frozen"
            assert activation.thaw is not None and activation.thaw.name == "reward"
            assert [f.name for f in activation.frozen] == ["policy"]
            assert set(activation.ms) == {"thaw", "swap", "total"}
            assert states(sched) == {"policy": "frozen", "reward": "running"}
        with sched.active("policy") as activation:
            assert [f.name for f in activation.frozen] == ["reward"]
            assert activation.thaw is not None and activation.thaw.bytes == 16000 << 20
            assert states(sched) == {"policy": "running", "reward": "frozen"}


def test_nothing_is_frozen_when_it_fits(sched: GpuSched, simjob: SimJob) -> None:
    simjob("reward", 8000)
    sched.freeze("reward")
    simjob("policy", 8000)

    activation = sched.activate("reward")
    assert activation.frozen == [] and activation.thaw is not None
    assert states(sched) == {"policy": "running", "reward": "running"}


def test_least_recently_active_first_and_no_more_than_needed(sched: GpuSched, simjob: SimJob) -> None:
    simjob("big", 12000)
    sched.freeze("big")
    for name in ("a", "b", "c"):  # 24000 of 24576 MiB
        simjob(name, 8000)
    for name in ("c", "a", "b"):
        sched.activate(name)  # already running: only the order is recorded

    activation = sched.activate("big")  # needs two of them gone
    assert [f.name for f in activation.frozen] == ["c", "a"]
    assert set(activation.ms) == {"thaw", "freeze", "total"}
    assert states(sched) == {"a": "frozen", "b": "running", "big": "running", "c": "frozen"}


def test_a_process_in_use_is_never_frozen(sched: GpuSched, simjob: SimJob) -> None:
    simjob("reward", 16000)
    sched.freeze("reward")
    simjob("policy", 16000)

    with sched.active("policy"):
        with pytest.raises(ResourceExhausted, match="nothing of its owner's on its GPUs may be frozen"):
            sched.activate("reward")
        assert states(sched) == {"policy": "running", "reward": "frozen"}
    assert [f.name for f in sched.activate("reward").frozen] == ["policy"]  # free again after the block


def test_a_block_on_one_client_is_never_frozen_by_another(daemon: Daemon, sched: GpuSched, simjob: SimJob) -> None:
    """The bug of the client-side activation: two clients did not see each other's blocks."""
    simjob("reward", 16000)
    sched.freeze("reward")
    simjob("policy", 16000)

    with GpuSched(daemon.socket) as other:
        with sched.active("policy"):
            with pytest.raises(ResourceExhausted, match="nothing of its owner's on its GPUs may be frozen"):
                other.activate("reward")
            assert states(sched) == {"policy": "running", "reward": "frozen"}
        assert [f.name for f in other.activate("reward").frozen] == ["policy"]  # the hold ends with the block


def test_failure_thaws_back_what_it_froze(sched: GpuSched, simjob: SimJob) -> None:
    simjob("huge", 20000)
    sched.freeze("huge")
    for name in ("a", "b", "c"):
        simjob(name, 8000)

    with pytest.raises(ResourceExhausted, match=r"after freezing a, b; thawed back what it froze"):
        sched.activate("huge", evict=["a", "b"])  # 16576 MiB free at best
    assert states(sched) == {"a": "running", "b": "running", "c": "running", "huge": "frozen"}

    with pytest.raises(ResourceExhausted, match="nothing of its owner's"):
        sched.activate("huge", evict=[])
    with pytest.raises(ResourceExhausted):
        sched.activate("huge", evict=["a"])  # a swap: the daemon thaws a back itself
    assert states(sched) == {"a": "running", "b": "running", "c": "running", "huge": "frozen"}


def test_other_users_work_and_other_gpus_are_left_alone(
    sched: GpuSched, simjob: SimJob, bin_dir: Path
) -> None:
    simjob("mine", 16000)
    sched.freeze("mine")
    simjob("elsewhere", 20000, gpu=1)
    sched.run("theirs", [str(bin_dir / "gpusched-simjob"), "--vram", "16000"], gpu=0, user="nobody")
    with guarded(sched.follow_logs("theirs")) as lines:
        next(line for line in lines if line.startswith("simjob: allocated"))

    with pytest.raises(ResourceExhausted):
        sched.activate("mine")
    assert states(sched) == {"elsewhere": "running", "mine": "frozen", "theirs": "running"}


def test_bad_names_and_states(sched: GpuSched) -> None:
    with pytest.raises(NotFound):
        sched.activate("ghost")
    sched.run("done", ["true"])
    sched.wait("done")
    with pytest.raises(Conflict, match="it is exited"):
        with sched.active("done"):
            pass  # never reached


def test_rl_swap_example(daemon: Daemon, sched: GpuSched, bin_dir: Path) -> None:
    if REPO_ROOT is None:
        pytest.skip("needs the repository's examples/")
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "rl_swap.py"), "--steps", "2", "--vram", "13000"],
        env={**os.environ, "GPUSCHED_SOCKET": daemon.socket, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    rows = {line[:18].strip(): line[18:].split() for line in run.stdout.splitlines()[3:] if line.strip()}
    assert rows["activate policy"][0] == "2" and rows["activate reward"][0] == "2"
    assert rows["daemon freeze"][0] == "3" and rows["daemon thaw"][0] == "3"  # the first policy was running
    assert sched.processes() == []  # it cleans up what it started


def test_rl_swap_leaves_other_processes_alone(daemon: Daemon, sched: GpuSched, bin_dir: Path) -> None:
    """A process of the same user on the same GPU is never frozen to make room: only the two models are."""
    if REPO_ROOT is None:
        pytest.skip("needs the repository's examples/")
    sched.run("bystander", [str(bin_dir / "gpusched-simjob"), "--vram", "1000"], gpu=0)
    with guarded(sched.follow_logs("bystander")) as lines:
        next(line for line in lines if line.startswith("simjob: allocated"))
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "rl_swap.py"), "--steps", "2", "--vram", "13000"],
        env={**os.environ, "GPUSCHED_SOCKET": daemon.socket, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert states(sched) == {"bystander": "running"}
