"""The disk tier against a real gpuschedd on two simulated GPUs with real CRIU:
hibernate, thaw from disk, incremental re-hibernate, fork, snapshots and their
deletion, and the per-process policy. Skipped where CRIU is not available (it
needs root and scripts/install-criu.sh)."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from gpusched import (
    CheckpointResult,
    Conflict,
    Exists,
    ForkResult,
    GpuSched,
    HibernateResult,
    InvalidArgument,
    NotFound,
    Policy,
    Process,
    Snapshot,
    Unavailable,
)
from harness import Daemon, find_criu, guarded

GPU0 = "GPU-5a1d0000-0000-4000-8000-000000000000"
MiB = 1 << 20
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

SimJob = Callable[[str], Process]


@pytest.fixture
def disk(daemon: Daemon) -> Iterator[GpuSched]:
    """A client of a daemon whose disk tier runs on real CRIU."""
    if daemon.criu in (None, "none"):
        pytest.skip(f"needs CRIU >= 4.0 for the disk tier ({find_criu()[1]})")
    with GpuSched(daemon.socket) as client:
        yield client


@pytest.fixture
def simjob(bin_dir: Path, disk: GpuSched) -> SimJob:
    """``simjob(name)`` runs gpusched-simjob on GPU 0 with 256 MiB of simulated VRAM,
    16 MiB of host memory filled with a pattern and a tick counter, and returns once
    it allocated its VRAM and ticked (GPU samples may not show it yet)."""

    def start(name: str) -> Process:
        cmd = [str(bin_dir / "gpusched-simjob"), "--vram", "256", "--host-mem", "16", "--tick", "0.05"]
        disk.run(name, cmd, gpu=0)
        wait_for_tick(disk, name, 1)
        assert "simjob: allocated 256 MiB on " + GPU0 in disk.logs(name), disk.logs(name)
        return disk.status(name)

    return start


def wait_for_tick(sched: GpuSched, name: str, after: int) -> int:
    """Follows the log until the tick counter goes past ``after``; returns that tick."""
    with guarded(sched.follow_logs(name, lines=-1)) as lines:
        for line in lines:
            match = re.fullmatch(r"tick (\d+)", line)
            if match and int(match.group(1)) > after:
                return int(match.group(1))
    raise AssertionError(f"{name} never ticked past {after}; its log: {sched.logs(name, 20)}")


def eventually(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether check() comes true within seconds (GPU samples lag a little)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def last_tick(sched: GpuSched, name: str) -> int:
    ticks = [int(line[5:]) for line in sched.logs(name, 50) if re.fullmatch(r"tick \d+", line)]
    assert ticks, sched.logs(name, 20)
    return ticks[-1]


def test_hibernate_thaw_and_rehibernate(disk: GpuSched, simjob: SimJob) -> None:
    job = simjob("warm")

    first = disk.hibernate("warm")
    assert isinstance(first, HibernateResult)
    assert (first.name, first.state, first.parent, first.reused) == ("warm", "hibernated", "", 0)
    assert UUID.fullmatch(first.snapshot)
    assert first.written > 16 * MiB and first.bytes >= first.written and first.pages > 0
    assert first.gpu_bytes == 256 * MiB  # checkpointed into host memory, then dumped
    assert {"freeze", "dump", "total"} <= set(first.ms)
    process = disk.status("warm")
    assert (process.state, process.tier, process.snapshot, process.pid) == ("hibernated", "disk", first.snapshot, 0)
    assert eventually(lambda: disk.gpus()[0].used_mib == 0)  # the next GPU sample shows it gone
    ticks = last_tick(disk, "warm")

    snapshots = disk.snapshots()
    assert [type(s) for s in snapshots] == [Snapshot]
    snap = snapshots[0]
    assert (snap.id, snap.name, snap.process_id, snap.user, snap.uid) == (first.snapshot, "warm", job.id, "root", 0)
    assert (snap.parent, snap.holds, snap.bytes, snap.gpus, snap.vram_mib) == ("", True, first.bytes, [GPU0], 256)
    assert snap.created_at is not None and snap.created_at.tzinfo is not None
    assert disk.snapshots("warm") == snapshots and disk.snapshots("other") == []
    status = disk.status()
    assert (status.states, status.disk_bytes, status.disk_budget) == ({"hibernated": 1}, first.bytes, 0)
    assert status.criu and status.criu == disk.hello().criu
    assert 0 < status.disk_keep_free < status.disk_free  # --disk-keep-free's default, 0.1 of the disk

    with pytest.raises(Conflict, match="already hibernated"):
        disk.hibernate("warm")
    with pytest.raises(Conflict, match="holds the hibernated process"):
        disk.delete_snapshot(first.snapshot)

    thawed = disk.thaw("warm")
    assert isinstance(thawed, CheckpointResult)
    assert (thawed.name, thawed.op, thawed.state, thawed.snapshot, thawed.gpus) == ("warm", "thaw", "running", first.snapshot, [GPU0])
    assert "criu_restore" in thawed.ms
    process = disk.status("warm")
    assert (process.state, process.tier, process.vram_mib) == ("running", "gpu", 256)
    assert process.pid > 0 and process.snapshot == first.snapshot  # the parent of its next hibernate
    assert wait_for_tick(disk, "warm", ticks) == ticks + 1  # the same counter, not a fresh start
    disk.kill("warm", signal="USR1")  # the job checks its host memory's pattern
    with guarded(disk.follow_logs("warm", lines=-1)) as lines:
        assert "simjob: host memory verified" in lines

    second = disk.hibernate("warm")
    assert (second.state, second.parent) == ("hibernated", first.snapshot)
    assert second.snapshot not in (first.snapshot, "")
    assert second.written * 4 < first.written, (first, second)  # only the pages that changed
    assert 0 < second.reused <= second.pages
    assert [(s.id, s.parent, s.holds) for s in disk.snapshots()] == [
        (first.snapshot, "", True),  # the chain the process lives in
        (second.snapshot, first.snapshot, True),
    ]

    with pytest.raises(Conflict):
        disk.delete_snapshot(second.snapshot)
    with pytest.raises(NotFound, match="not found"):
        disk.delete_snapshot(str(uuid.uuid4()))
    with pytest.raises(InvalidArgument, match="not a snapshot id"):
        disk.delete_snapshot("../x")

    assert disk.thaw("warm").snapshot == second.snapshot
    with pytest.raises(Conflict, match="delete that one first"):
        disk.delete_snapshot(first.snapshot)  # the parent of another
    deleted = disk.delete_snapshot(second.snapshot)
    assert isinstance(deleted, Snapshot) and (deleted.id, deleted.name, deleted.holds) == (second.snapshot, "warm", False)
    assert disk.delete_snapshot(first.snapshot).id == first.snapshot
    assert disk.snapshots() == [] and disk.status().disk_bytes == 0
    assert disk.status("warm").snapshot == ""


def test_fork(disk: GpuSched, simjob: SimJob) -> None:
    source = simjob("src")
    with pytest.raises(InvalidArgument, match="give one per copy"):
        disk.fork("src", 2, gpus=[1])

    forked = disk.fork("src", 2)
    assert isinstance(forked, ForkResult)
    assert (forked.name, [c.name for c in forked.copies]) == ("src", ["src-1", "src-2"])
    assert forked.bytes > 16 * MiB and {"dump", "total"} <= set(forked.ms)
    for copy in forked.copies:
        assert isinstance(copy, Process)
        assert (copy.state, copy.tier, copy.cmd, copy.vram_mib) == ("running", "gpu", source.cmd, 256)
        assert copy.id != source.id and copy.pid not in (0, source.pid)
    assert [(p.name, p.state) for p in disk.processes()] == [("src", "running"), ("src-1", "running"), ("src-2", "running")]
    for name in ("src-1", "src-2"):
        assert wait_for_tick(disk, name, 0) > 1  # its own log, going on from the source's counter
    assert disk.snapshots() == []  # the fork's image is gone with it

    with pytest.raises(Exists, match='"src-1" already exists'):
        disk.fork("src", 1)
    with pytest.raises(InvalidArgument, match="copies 0 is outside"):
        disk.fork("src", 0)
    with pytest.raises(NotFound):
        disk.fork("ghost", 1)


def test_policy(sched: GpuSched) -> None:
    started = sched.run("warm", ["sleep", "1000"], gpu=0, priority=-5, ttl="10m", idle=30)
    assert started.policy == Policy(priority=-5, pin=False, ttl=600.0, idle=30.0)
    assert sched.run("plain", ["sleep", "1000"]).policy == Policy()

    changed = sched.set_policy("warm", priority=7, pin=True)
    assert isinstance(changed, Process)
    assert changed.policy == Policy(priority=7, pin=True, ttl=600.0, idle=30.0)  # the rest stays
    assert sched.set_policy("warm", ttl=0, idle="1h30m").policy == Policy(priority=7, pin=True, ttl=0.0, idle=5400.0)
    assert sched.set_policy("warm", pin=False).policy.pin is False
    assert sched.set_policy("warm").policy == sched.status("warm").policy  # nothing to change

    with pytest.raises(InvalidArgument, match="bad duration"):
        sched.set_policy("warm", ttl="soon")
    with pytest.raises(InvalidArgument, match="at least"):
        sched.set_policy("warm", idle=0.001)
    with pytest.raises(InvalidArgument, match="outside -1000..1000"):
        sched.set_policy("warm", priority=5000)
    with pytest.raises(NotFound):
        sched.set_policy("ghost", priority=1)
    sched.kill("plain")
    with pytest.raises(Conflict, match="already exited"):
        sched.set_policy("plain", priority=-1)


def test_disk_tier_off(plain_daemon: Daemon) -> None:
    with GpuSched(plain_daemon.socket) as sched:
        hello = sched.hello()
        assert hello.criu == "" and not {"hibernate", "fork"} & set(hello.capabilities)
        assert (sched.status().criu, sched.status().disk_bytes) == ("", 0)
        sched.run("warm", ["sleep", "1000"], gpu=0)
        with pytest.raises(Unavailable, match="the disk tier is off"):
            sched.hibernate("warm")
        with pytest.raises(Unavailable, match="the disk tier is off"):
            sched.fork("warm", 1)
        assert sched.snapshots() == []
        with pytest.raises(NotFound):
            sched.hibernate("ghost")
        with pytest.raises(NotFound):
            sched.delete_snapshot(str(uuid.uuid4()))
