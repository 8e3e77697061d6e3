"""GPU memory fillers: the result types and params offline, then against a real
gpuschedd on two simulated GPUs (24576 MiB each). A filler's helper settles
within a few ticks; the waits poll with a deadline (GUARD_SECONDS) and fail
the test instead of hanging it."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, TypeVar

import pytest

import gpusched
from gpusched import (
    Conflict,
    Event,
    Filler,
    GpuSched,
    GpuSchedError,
    InvalidArgument,
    NotFound,
    Process,
    Status,
)
from harness import GUARD_SECONDS, Daemon, guarded
from test_offline import HELLO, FakeDaemon

GPU0 = "GPU-5a1d0000-0000-4000-8000-000000000000"
GPU1 = "GPU-5a1d0000-0000-4000-8000-000000000001"
TOTAL = 24576

T = TypeVar("T")

FILLER_WIRE: Dict[str, Any] = {
    "index": 1, "uuid": GPU1, "user": "ana", "uid": 1000, "ratio": 1, "target_mib": 24576,
    "held_mib": 24320, "reserved_mib": 512, "chunk_mib": 256, "pid": 4242, "process": "rollout",
    "session": True, "created_at": "2026-11-21T07:25:57Z", "error": "", "future_field": 1,
}


def eventually(probe: Callable[[], Optional[T]], what: str) -> T:
    """Calls ``probe`` until it returns something other than None, for up to GUARD_SECONDS."""
    deadline = time.monotonic() + GUARD_SECONDS
    while True:
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {GUARD_SECONDS:g}s")
        time.sleep(0.02)


def settled(sched: GpuSched, gpu: int) -> Filler:
    """GPU ``gpu``'s filler once it holds within one chunk below its target, as
    ``fillers()`` lists it (nothing else is on the GPU in these tests)."""

    def probe() -> Optional[Filler]:
        for f in sched.fillers():
            if f.index == gpu and f.held_mib > 0 and f.target_mib - f.chunk_mib <= f.held_mib <= f.target_mib:
                return f
        return None

    return eventually(probe, f"the filler on GPU {gpu} settling at its target")


# Offline.


def test_filler_types() -> None:
    filler = Filler.from_dict(FILLER_WIRE)
    assert (filler.index, filler.uuid, filler.user, filler.uid, filler.ratio, filler.target_mib) == (
        1, GPU1, "ana", 1000, 1.0, 24576)
    assert isinstance(filler.ratio, float)
    assert (filler.held_mib, filler.reserved_mib, filler.chunk_mib, filler.pid, filler.process, filler.session) == (
        24320, 512, 256, 4242, "rollout", True)
    assert filler.created_at == datetime(2026, 11, 21, 7, 25, 57, tzinfo=timezone.utc) and filler.raw == FILLER_WIRE
    assert Filler.from_dict({}) == Filler() and Filler().created_at is None
    assert not filler.held  # not from a client: nothing holds it
    with pytest.raises(InvalidArgument, match=r"GpuSched.unfill\(1\)"):
        filler.release()

    assert Status.from_dict({"fillers": [FILLER_WIRE]}).fillers == [filler]
    assert Status.from_dict({}).fillers == []
    assert gpusched.GPU.from_dict({"index": 1, "filler": FILLER_WIRE}).filler == filler
    assert gpusched.GPU.from_dict({"index": 0}).filler is None
    assert Process.from_dict({"name": "rollout", "filled": 0.95}).filled == 0.95
    assert Process.from_dict({}).filled == 0.0
    event = Event.from_dict({"type": "filler", "name": GPU1, "filler": {**FILLER_WIRE, "held_mib": 0}})
    assert event.type == "filler" and event.filler is not None and event.filler.held_mib == 0


def test_fill_params_on_the_wire(tmp_short: Path) -> None:
    def answer(request: Dict[str, Any]) -> Dict[str, Any]:
        method, params = request["method"], request.get("params") or {}
        if method == "hello":
            return HELLO
        if method in ("fill", "unfill"):
            gpu = params["gpu"]
            index = gpu if isinstance(gpu, int) else int(gpu[4:]) if gpu[4:].isdigit() else 1
            return {"ok": True, "result": {**FILLER_WIRE, "index": index, "uuid": f"GPU-{index}",
                                           "session": bool(params.get("session"))}}
        if method == "fillers":
            return {"ok": True, "result": {"fillers": [{**FILLER_WIRE, "index": 3, "uuid": "GPU-3"}]}}
        return {"ok": True, "result": {"name": params.get("name", "")}}

    fake = FakeDaemon(tmp_short, answer)
    with GpuSched(fake.path) as sched:
        persistent = sched.fill(0, ratio=0.95)
        assert persistent.held and persistent.index == 0 and not persistent.session
        sched.fill("GPU-5f0c", mib="20G")
        session = sched.fill(2, mib=20480, session=True)
        assert session.held and session.session
        again = sched.fill(2, ratio=0.5, session=True)  # a new target: the filler stays on its connection
        assert again.held
        sched.run("rollout", ["true"], gpu=1, filled=0.95, dir="/")
        sched.run("capped", ["true"], dir="/", mps_threads=30, mps_mem_limit="4G")
        [listed] = sched.fillers()
        assert listed.index == 3 and listed.held
        listed.release()  # not this client's session: an unfill by GPU
        assert not listed.held
        persistent.release()
        persistent.release()  # a second release does nothing
        assert sched.unfill(2).index == 2  # on the session's own connection
        assert not session.held and not again.held
        sched.unfill(4)  # no session held: on the main connection
        with sched.fill(5, ratio=0.1, session=True) as held:
            assert held.held
        assert not held.held
        sched.fill(6, ratio=0.2, session=True)  # released by close()
    fake.close()
    assert [(r["method"], r.get("params")) for r in fake.requests if r["method"] != "hello"] == [
        ("fill", {"gpu": 0, "ratio": 0.95}),
        ("fill", {"gpu": "GPU-5f0c", "mib": "20G"}),
        ("fill", {"gpu": 2, "mib": 20480, "session": True}),
        ("fill", {"gpu": 2, "ratio": 0.5, "session": True}),
        ("run", {"name": "rollout", "cmd": ["true"], "dir": "/", "gpu": 1, "filled": 0.95}),
        ("run", {"name": "capped", "cmd": ["true"], "dir": "/", "mps_threads": 30, "mps_mem_limit": "4G"}),
        ("fillers", None),
        ("unfill", {"gpu": "GPU-3"}),
        ("unfill", {"gpu": "GPU-0"}),
        ("unfill", {"gpu": "GPU-2"}),
        ("unfill", {"gpu": 4}),
        ("fill", {"gpu": 5, "ratio": 0.1, "session": True}),
        ("unfill", {"gpu": "GPU-5"}),
        ("fill", {"gpu": 6, "ratio": 0.2, "session": True}),
        ("unfill", {"gpu": "GPU-6"}),
    ]


def test_fill_refuses_nan_before_sending(tmp_short: Path) -> None:
    fake = FakeDaemon(tmp_short, lambda request: HELLO)
    with GpuSched(fake.path) as sched:
        with pytest.raises(InvalidArgument, match="cannot be sent as JSON"):
            sched.fill(0, ratio=float("nan"))
    fake.close()
    assert "fill" not in fake.methods()


# Against a real daemon.


@pytest.fixture
def sched(daemon: Daemon) -> Iterator[GpuSched]:
    """A client of the test's daemon that releases the fillers a failed test left:
    a helper outlives its daemon by design (until --filler-orphan)."""
    with GpuSched(daemon.socket, timeout=GUARD_SECONDS) as client:
        yield client
        try:
            for left in client.fillers():
                client.unfill(left.index)
        except GpuSchedError:
            pass  # the test's own failure says why


def test_hello_says_fill(sched: GpuSched) -> None:
    assert "fill" in sched.hello().capabilities


def test_fill_fillers_unfill(sched: GpuSched) -> None:
    filler = sched.fill(1, ratio=0.5)
    assert isinstance(filler, Filler) and filler.held
    assert (filler.index, filler.uuid, filler.user, filler.uid, filler.ratio, filler.session) == (
        1, GPU1, "root", 0, 0.5, False)
    assert filler.target_mib == TOTAL // 2 and filler.chunk_mib == 256 and filler.pid > 0
    assert filler.created_at is not None and filler.created_at.tzinfo is not None

    now = settled(sched, 1)
    assert (now.uuid, now.pid, now.target_mib, now.process, now.error) == (GPU1, filler.pid, TOTAL // 2, "", "")
    assert now.held  # listed by this client: releasable
    assert [f.index for f in sched.status().fillers] == [1]
    eventually(  # the GPU's total usage, once a sample saw it
        lambda: True if now.target_mib - now.chunk_mib <= sched.gpus()[1].used_mib <= now.target_mib else None,
        "GPU 1's total usage at the filler's target",
    )

    again = sched.fill(1, mib="18G")  # the same owner: a new target for the same filler
    assert (again.target_mib, again.ratio, again.pid, again.created_at) == (18432, 0.0, filler.pid, filler.created_at)
    assert settled(sched, 1).target_mib == 18432

    released = sched.unfill(1)
    assert (released.index, released.held_mib) == (1, 0)
    assert sched.fillers() == [] and sched.status().fillers == []
    with pytest.raises(NotFound):
        sched.unfill(1)
    filler.release()  # released elsewhere already: nothing to do
    assert not filler.held


def test_fill_bad_input(sched: GpuSched) -> None:
    for ratio in (1.5, -0.5):
        with pytest.raises(InvalidArgument, match="ratio"):
            sched.fill(0, ratio=ratio)
    with pytest.raises(InvalidArgument):
        sched.fill(0)  # neither ratio nor mib
    with pytest.raises(InvalidArgument):
        sched.fill(0, ratio=0.5, mib="1G")  # both
    with pytest.raises(InvalidArgument):
        sched.fill(0, mib="30G")  # more than the GPU
    with pytest.raises(InvalidArgument):
        sched.fill(7, ratio=0.5)  # no such GPU
    assert sched.fillers() == []


def test_session_filler_ends_with_its_client(sched: GpuSched, daemon: Daemon) -> None:
    with GpuSched(daemon.socket) as other:
        filler = other.fill(0, ratio=0.25, session=True)
        assert filler.session and filler.held
        assert settled(sched, 0).session
        with pytest.raises(Conflict):
            sched.fill(0, ratio=0.5)  # a persistent fill of a session filler's GPU
        other._drop()  # the main connection failing leaves the session filler alone
        assert [f.index for f in other.fillers()] == [0]
    assert not filler.held and sched.fillers() == []

    with sched.fill(1, ratio=0.25, session=True) as held:
        assert [f.index for f in sched.fillers()] == [1]
    assert not held.held and sched.fillers() == []


def test_filler_events(sched: GpuSched) -> None:
    with guarded(sched.events()) as events:
        assert next(events).type == "subscribed"
        sched.fill(0, ratio=0.5)
        started = next(e for e in events if e.type == "filler")
        assert started.name == GPU0 and started.filler is not None and started.filler.target_mib == TOTAL // 2
        sched.unfill(0)
        released = next(e for e in events if e.type == "filler" and e.filler is not None and e.filler.held_mib == 0)
        assert released.name == GPU0


def test_run_filled(sched: GpuSched, bin_dir: Path) -> None:
    simjob = str(bin_dir / "gpusched-simjob")
    process = sched.run("rollout", [simjob, "--vram", "1024"], gpu=1, filled=0.5)
    assert process.filled == 0.5
    filler = eventually(lambda: next((f for f in sched.fillers() if f.process == "rollout"), None),
                        "the attached filler listed")
    assert (filler.index, filler.target_mib, filler.session) == (1, TOTAL // 2, False)
    assert sched.status("rollout").filled == 0.5
    with pytest.raises(Conflict):
        sched.run("second", ["true"], gpu=1, filled=0.5, dir="/")
    with pytest.raises(Conflict):
        sched.fill(1, ratio=0.9)  # attached to a process
    with pytest.raises(InvalidArgument):
        sched.run("both", ["true"], gpus=[0, 1], filled=0.5, dir="/")
    with pytest.raises(InvalidArgument):
        sched.run("over", ["true"], gpu=0, filled=1.5, dir="/")
    with guarded(sched.events()) as events:
        assert next(events).type == "subscribed"
        sched.kill("rollout")
        # The release event comes once the helper freed its memory and exited.
        released = next(e for e in events if e.type == "filler" and e.filler is not None and e.filler.held_mib == 0)
    assert released.name == GPU1 and released.filler is not None and released.filler.process == "rollout"
    assert sched.fillers() == []


def test_filler_hands_over_to_its_owners_job(sched: GpuSched, bin_dir: Path) -> None:
    simjob = str(bin_dir / "gpusched-simjob")
    for gpu in (0, 1):
        sched.fill(gpu, ratio=0.95)
        settled(sched, gpu)
    job = sched.submit([simjob, "--vram", "8192", "--hold", "0.2"], name="owned", vram="8G")
    done = sched.wait_job(job.name, timeout=GUARD_SECONDS)
    assert done.state == "done", done.reason
    for gpu in (0, 1):
        sched.unfill(gpu)


def test_gpus_show_the_filler(sched: GpuSched) -> None:
    sched.fill(1, ratio=0.5)
    settled(sched, 1)
    gpu0, gpu1 = sched.gpus()
    assert gpu0.filler is None
    assert gpu1.filler is not None and (gpu1.filler.index, gpu1.filler.target_mib) == (1, TOTAL // 2)
    sched.unfill(1)
