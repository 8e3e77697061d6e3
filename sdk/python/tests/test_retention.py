"""Removing finished history against a real gpuschedd: rm of several names and of
every exited process, jobs prune, state filters, and the daemon's own retention
(--keep-finished), seen through its events."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gpusched import Event, GpuSched, InvalidArgument, NotFound, RmFailure
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
