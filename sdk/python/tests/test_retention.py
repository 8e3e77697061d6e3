"""Removing finished history against a real gpuschedd: rm of several names and of
every exited process, jobs prune, state filters, and the daemon's own retention
(--keep-finished), seen through its events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, List

import pytest

from gpusched import LIST_CMD_BYTES, Event, GpuSched, InvalidArgument, NotFound, RmFailure
from harness import Daemon, guarded

PATH_ENV = {"PATH": "/usr/bin:/bin"}


def exited(sched: GpuSched, name: str) -> None:
    """Runs ``true`` as ``name`` and waits for its exit."""
    sched.run(name, ["true"], dir="/", env=PATH_ENV)
    assert sched.wait(name).state == "exited"


def test_remove_several(sched: GpuSched) -> None:
    exited(sched, "a")
    exited(sched, "b")
    sched.run("alive", ["sleep", "1000"], dir="/", env=PATH_ENV)
    result = sched.remove(["a", "alive", "nope", "b"])
    assert [p.name for p in result.removed] == ["a", "b"]
    assert [(f.name, f.code) for f in result.failed] == [("alive", "conflict"), ("nope", "not_found")]
    assert isinstance(result.failed[0], RmFailure) and "kill it before rm" in result.failed[0].error
    assert [p.name for p in sched.processes()] == ["alive"]


def test_remove_exited_and_states(sched: GpuSched) -> None:
    exited(sched, "x")
    exited(sched, "y")
    sched.run("alive", ["sleep", "1000"], dir="/", env=PATH_ENV)
    assert [p.name for p in sched.processes(states=["exited"])] == ["x", "y"]
    assert [p.name for p in sched.processes(states=["running", "frozen"])] == ["alive"]
    result = sched.remove(exited=True)
    assert ([p.name for p in result.removed], result.failed) == (["x", "y"], [])
    assert [p.name for p in sched.processes()] == ["alive"]


def test_remove_bad_input_changes_nothing(sched: GpuSched) -> None:
    exited(sched, "keep")
    with pytest.raises(InvalidArgument, match="names is empty"):
        sched.remove([])
    with pytest.raises(InvalidArgument, match=r"\.\./etc"):
        sched.remove(["keep", "../etc"])
    with pytest.raises(InvalidArgument, match="not both"):
        sched.remove(["keep"], exited=True)
    with pytest.raises(InvalidArgument, match="unknown state"):
        sched.processes(states=["zombie"])
    assert [p.name for p in sched.processes()] == ["keep"]


def test_jobs_states_and_prune(sched: GpuSched) -> None:
    sched.submit(["true"], name="fine", dir="/", env=PATH_ENV)
    assert sched.wait_job("fine").state == "done"
    assert [j.name for j in sched.jobs(states=["finished"])] == ["fine"]
    assert sched.jobs(states=["failed", "queued"]) == []
    with pytest.raises(InvalidArgument, match="unknown state"):
        sched.jobs(states=["nope"])
    assert [j.name for j in sched.prune_jobs()] == ["fine"]
    with pytest.raises(NotFound):
        sched.job("fine")
    assert sched.prune_jobs() == []


@pytest.fixture
def keep_one(bin_dir: Path) -> Iterator[GpuSched]:
    """A client of a gpuschedd that keeps one finished process and job per user."""
    d = Daemon(bin_dir, criu="none", args=["--keep-finished", "1"])
    d.start()
    try:
        with GpuSched(d.socket) as client:
            yield client
    finally:
        d.close()


def test_retention_event(keep_one: GpuSched) -> None:
    with guarded(keep_one.events()) as events:
        assert next(events).type == "subscribed"
        exited(keep_one, "older")
        exited(keep_one, "newer")
        removed: Event = next(e for e in events if e.type == "removed")
    assert (removed.name, removed.reason) == ("older", "retention")
    assert [p.name for p in keep_one.processes()] == ["newer"]


def test_listings_cut_long_commands(sched: GpuSched) -> None:
    """A command past LIST_CMD_BYTES is cut in processes(), jobs(), remove() and
    prune_jobs(), with cmd_truncated set; status(name) and job(name) return it whole."""
    long = ["true", "x" * 3000, "y" * 3000]
    sched.run("long", long, dir="/", env=PATH_ENV)
    assert sched.wait("long").state == "exited"
    sched.submit(long, name="longjob", dir="/", env=PATH_ENV)
    assert sched.wait_job("longjob").finished
    short_job = sched.submit(["true"], name="shortjob", dir="/", env=PATH_ENV)
    assert sched.wait_job(short_job.name).finished

    def check_cut(cmd: List[str], truncated: bool) -> None:
        assert truncated
        assert len(json.dumps(cmd, separators=(",", ":"))) <= LIST_CMD_BYTES
        assert cmd[:2] == long[:2] and long[2].startswith(cmd[2]) and len(cmd) == 3

    for p in sched.processes(states=["exited"]):
        if p.name != "shortjob":
            check_cut(p.cmd, p.cmd_truncated)
    whole = sched.status("long")
    assert (whole.cmd, whole.cmd_truncated) == (long, False)
    job = sched.job("longjob")
    assert (job.cmd, job.cmd_truncated) == (long, False)
    listed = {j.name: j for j in sched.jobs(all=True)}
    check_cut(listed["longjob"].cmd, listed["longjob"].cmd_truncated)
    assert (listed["shortjob"].cmd, listed["shortjob"].cmd_truncated) == (["true"], False)
    assert "cmd_truncated" not in listed["shortjob"].raw

    removed = sched.remove(exited=True).removed
    assert {p.name for p in removed} == {"long", "longjob", "shortjob"}
    for p in removed:
        if p.name != "shortjob":
            check_cut(p.cmd, p.cmd_truncated)
    pruned = {j.name: j for j in sched.prune_jobs()}
    check_cut(pruned["longjob"].cmd, pruned["longjob"].cmd_truncated)
