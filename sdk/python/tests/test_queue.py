"""The job queue and GPU leases against a real gpuschedd on two simulated GPUs
(24576 MiB each). Waits follow the daemon's events, never the clock; the only
timed waits are the short ones that prove something does NOT happen."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Callable, List, Optional, Union

import pytest

from gpusched import (
    Conflict,
    Event,
    Exists,
    GpuSched,
    InvalidArgument,
    Job,
    Lease,
    LeaseGPU,
    NotFound,
    ResourceExhausted,
    Timeout,
)
from harness import Daemon, guarded

GPU0 = "GPU-5a1d0000-0000-4000-8000-000000000000"
GPU1 = "GPU-5a1d0000-0000-4000-8000-000000000001"
SDK_DIR = Path(__file__).resolve().parents[1]

SimJob = Callable[..., List[str]]


@pytest.fixture
def simjob(bin_dir: Path) -> SimJob:
    """``simjob("--vram", "512", "--hold", "0.1")``: the argv of gpusched-simjob with those flags."""
    return lambda *args: [str(bin_dir / "gpusched-simjob"), *args]


def is_aware(value: Union[datetime, None]) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def wait_state(sched: GpuSched, name: str, state: str) -> Job:
    """Follows the job's events until it is in ``state`` (checked once subscribed,
    so a change just before is not missed) and returns it."""
    with guarded(sched.events(name)) as events:
        assert next(events).type == "subscribed"
        job = sched.job(name)
        if job.state == state:
            return job
        for event in events:
            if event.type == "job" and event.job_state == state and not event.warning:
                reached: Optional[Job] = event.job
                assert reached is not None
                return reached
    raise AssertionError(f"job {name} never reached {state}: {sched.job(name)}")


def test_hello_says_queue_and_leases(sched: GpuSched) -> None:
    assert {"queue", "leases"} <= set(sched.hello().capabilities)


def test_submit_and_wait_job(sched: GpuSched, simjob: SimJob) -> None:
    cmd = simjob("--vram", "512", "--hold", "0.1")
    job = sched.submit(cmd, name="sim", vram=1024, timeout="1h", retries=1, priority=3)
    assert isinstance(job, Job) and job.id.startswith("j")
    assert (job.name, job.state, job.user, job.uid, job.cmd, job.dir) == ("sim", "queued", "root", 0, cmd, os.getcwd())
    assert (job.vram, job.vram_mib, job.gpus, job.priority, job.timeout) == (1024, 1024, 1, 3, 3600.0)
    assert (job.retries, job.retries_left, job.preemptible, job.attempts) == (1, 1, False, [])
    assert is_aware(job.submitted_at) and job.started_at is None and job.exit is None and not job.finished

    events: List[Event] = []
    done = sched.wait_job("sim", on_event=events.append)
    assert isinstance(done, Job) and done.finished
    assert (done.id, done.state, done.process) == (job.id, "done", "sim")
    assert done.exit is not None and done.exit.code == 0
    assert is_aware(done.started_at) and is_aware(done.ended_at) and done.verdict
    [attempt] = done.attempts
    assert (attempt.n, attempt.outcome, attempt.vram_mib, attempt.oom, attempt.preempted) == (1, "done", 1024, False, 0)
    assert attempt.exit is not None and attempt.exit.code == 0 and attempt.gpus in ([GPU0], [GPU1])
    assert is_aware(attempt.started_at) and is_aware(attempt.ended_at)
    # What job_wait streamed on the way (nothing if the job had finished before it looked).
    assert all(e.type == "job" and e.job is not None and e.job.id == job.id for e in events)
    assert [e.job_state for e in events][-1:] in ([], ["done"])

    assert sched.wait_job(job.id) == sched.job("sim")  # finished: answered at once
    assert (sched.status().jobs, sched.status().leases) == ({"done": 1}, 0)
    process = sched.status("sim")  # each attempt is a managed process named after the job
    assert (process.job, process.state, process.exit and process.exit.code) == (job.id, "exited", 0)


def test_job_environment_and_dir_default_as_run(sched: GpuSched) -> None:
    job = sched.submit(["env"], name="bare")
    assert job.dir == os.getcwd()
    sched.wait_job("bare")
    lines = sched.logs("bare")
    assert f"GPUSCHED_JOB={job.id}" in lines
    assert all(line.startswith(("GPUSCHED_", "CUDA_")) for line in lines), lines

    sched.submit(["env"], name="given", dir="/", env={"COLOUR": "red"})
    assert (sched.wait_job("given").dir, "COLOUR=red" in sched.logs("given")) == ("/", True)


def test_jobs_lists_and_filters(sched: GpuSched) -> None:
    assert sched.jobs() == [] and sched.jobs(all=True) == []
    first = sched.submit(["true"], name="first")
    assert sched.wait_job("first").state == "done"
    with sched.lease(gpus=2):  # whole GPUs: nothing else starts
        second = sched.submit(["true"])  # named after its id
        assert second.name == "job-" + second.id[1:]
        assert [j.id for j in sched.jobs()] == [second.id]  # unfinished only
        assert [j.id for j in sched.jobs(recent="1h")] == [first.id, second.id]  # and the recently finished
        assert [j.id for j in sched.jobs(recent=1e-9)] == [second.id]
        assert [j.id for j in sched.jobs(all=True)] == [first.id, second.id]  # in submission order
        assert [j.id for j in sched.jobs(state="done")] == [first.id]
        assert [j.id for j in sched.jobs(state="queued")] == [second.id]
        assert [j.id for j in sched.jobs(all=True, user="root")] == [first.id, second.id]
        assert sched.jobs(user="nobody", all=True) == []
        sched.cancel(second.id)
    assert sched.jobs() == []

    by_name, by_id = sched.job("first"), sched.job(first.id)
    assert by_name == by_id and (by_id.id, by_id.name, by_id.state) == (first.id, "first", "done")
    with pytest.raises(NotFound) as missing:
        sched.job("nope")
    assert str(missing.value) == 'job "nope" not found'

    again = sched.submit(["true"], name="first")  # a finished job's name may be reused
    assert again.id != first.id and sched.job("first").id == again.id and sched.job(first.id).id == first.id


def test_cancel_queued_and_running(sched: GpuSched, simjob: SimJob) -> None:
    with sched.lease(gpus=2):
        sched.submit(["true"], name="waiting")
        cancelled = sched.cancel("waiting")
        assert (cancelled.state, cancelled.reason, cancelled.attempts) == ("cancelled", "cancelled while queued by root", [])
        assert cancelled.finished and is_aware(cancelled.ended_at)
    with pytest.raises(Conflict) as conflict:
        sched.cancel("waiting")
    assert str(conflict.value) == 'job "waiting" is already cancelled'

    sched.submit(simjob("--vram", "512"), name="running")  # holds its memory until killed
    assert wait_state(sched, "running", "running").attempts[0].gpus in ([GPU0], [GPU1])
    ended = sched.cancel("running")
    assert (ended.state, ended.reason, ended.exit and ended.exit.signal) == ("cancelled", "cancelled by root", "SIGTERM")
    assert [a.outcome for a in ended.attempts] == ["cancelled"]
    assert sched.status("running").state == "exited"
    assert sched.wait_job("running") == sched.job("running")


def test_infeasible_jobs_are_refused(sched: GpuSched) -> None:
    with pytest.raises(InvalidArgument, match=r"can never start on this machine: .*the most it can ever get is 24576 MiB"):
        sched.submit(["true"], name="huge", vram="100G")
    with pytest.raises(InvalidArgument, match=r"job 2: .*the machine has 2"):
        sched.submit_many([{"cmd": ["true"], "name": "fits"}, {"cmd": ["true"], "gpus": 3}])
    assert sched.jobs(all=True) == []  # nothing queued


def test_bad_input_queues_nothing(sched: GpuSched) -> None:
    good = {"cmd": ["true"], "name": "good"}
    with pytest.raises(InvalidArgument) as invalid:
        sched.submit_many([good, {"cmd": [], "name": "bad"}])
    assert invalid.value.code == "invalid_argument"
    assert str(invalid.value).startswith('submit: nothing queued: job 2: submit "bad": cmd is empty')
    with pytest.raises(InvalidArgument, match="reserved for job ids"):
        sched.submit(["true"], name="j12")
    with pytest.raises(InvalidArgument, match="only letters, digits"):
        sched.submit(["true"], name="../x")
    with pytest.raises(InvalidArgument, match="vram"):
        sched.submit(["true"], vram="lots")
    with pytest.raises(InvalidArgument, match="priority 5000"):
        sched.submit_many([good, {"cmd": ["true"], "priority": 5000}])
    # Caught before anything is sent.
    with pytest.raises(InvalidArgument, match="argv list") as string_cmd:
        sched.submit("python3 train.py")
    assert string_cmd.value.code is None
    with pytest.raises(InvalidArgument, match="job 2: cmd must be an argv list"):
        sched.submit_many([good, {"cmd": "true"}])
    with pytest.raises(InvalidArgument, match="job 2: unknown field 'colour'"):
        sched.submit_many([good, {"cmd": ["true"], "colour": "red"}])
    with pytest.raises(InvalidArgument, match="job 1: cmd is missing"):
        sched.submit_many([{"name": "x"}])
    assert sched.jobs(all=True) == []
    assert sched.submit_many([]) == []

    with sched.lease(gpus=2):
        both = sched.submit_many([good, {"cmd": ["true"], "name": "other", "vram": None, "priority": 2}])
        assert [(j.name, j.state, j.priority, j.dir) for j in both] == [
            ("good", "queued", 0, os.getcwd()), ("other", "queued", 2, os.getcwd()),
        ]
        with pytest.raises(Exists):
            sched.submit(["true"], name="good")  # its job is not finished
        with pytest.raises(Exists):
            sched.submit_many([{"cmd": ["true"], "name": "new"}, {"cmd": ["true"], "name": "other"}])
        assert [j.name for j in sched.jobs()] == ["good", "other"]


def test_wait_job_timeout(sched: GpuSched) -> None:
    with sched.lease(gpus=2):
        sched.submit(["true"], name="stuck")
        with pytest.raises(Timeout) as timeout:
            sched.wait_job("stuck", timeout=0.2)
        assert timeout.value.code == "timeout" and str(timeout.value) == 'job "stuck" still queued after 200ms'
        stuck = sched.job("stuck")  # the main connection is still fine
        assert stuck.state == "queued" and stuck.reason.startswith("no_idle_gpu")
    with pytest.raises(NotFound):
        sched.wait_job("nope")


def test_acquire_release(sched: GpuSched) -> None:
    lease = sched.acquire(min_free="20G", gpu_ids=[1])
    assert isinstance(lease, Lease) and lease.id.startswith("l") and lease.held
    assert (lease.gpus, lease.gpu_ids, lease.uuids) == ([LeaseGPU(index=1, uuid=GPU1)], [1], [GPU1])
    assert (lease.cuda_visible_devices, lease.mib, lease.user, lease.uid) == (GPU1, 20480, "root", 0)
    assert is_aware(lease.acquired_at) and lease.released_at is None
    listed = sched.leases()
    assert listed == [lease] and listed[0].held and sched.status().leases == 1

    with pytest.raises(ResourceExhausted, match="no_memory"):
        sched.acquire(min_free=20480, gpu_ids=[GPU1])  # only 4096 MiB left beside it there
    other = sched.acquire(min_free=20480)  # fits on GPU 0
    assert other.gpu_ids == [0] and [x.id for x in sched.leases()] == [lease.id, other.id]

    sched.release(lease)
    assert not lease.held and [x.id for x in sched.leases()] == [other.id]
    sched.release(lease)  # a second release does nothing
    lease.release()
    with pytest.raises(NotFound) as missing:
        sched.release(lease.id)  # by id, the daemon answers
    assert str(missing.value) == f'lease "{lease.id}" not found'
    sched.release(other.id)  # by id, of a lease this client holds
    assert not other.held and sched.leases() == []

    # A lease nobody keeps a reference to stays held until released or the client closes.
    sched.acquire()
    gc.collect()
    [kept] = sched.leases()
    assert kept.held and kept.mib == 0
    kept.release()
    assert sched.leases() == []

    with sched.acquire(gpus=2) as both:  # acquire's Lease is a context manager too
        assert both.gpu_ids == [0, 1] and both.cuda_visible_devices == f"{GPU0},{GPU1}"
        sched._drop()  # the main connection failing (and reconnecting) leaves the lease alone
        assert [x.id for x in sched.leases()] == [both.id]
    assert not both.held and sched.leases() == []


def test_lease_apply(sched: GpuSched, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with sched.lease(gpu_ids=[1]) as lease:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"  # only apply() touches it
        assert lease.apply() == GPU1 and os.environ["CUDA_VISIBLE_DEVICES"] == GPU1
        child_env = {"PATH": "/usr/bin:/bin"}
        assert lease.apply(child_env) == GPU1 and child_env["CUDA_VISIBLE_DEVICES"] == GPU1
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"  # put back on release
    with pytest.raises(Conflict, match="was released"):
        lease.apply()

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with sched.lease() as lease:
        lease.apply()
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_whole_gpu_lease_blocks_a_job_until_the_with_block_exits(sched: GpuSched, simjob: SimJob) -> None:
    seen: List[str] = []
    with guarded(sched.events()) as events:
        assert next(events).type == "subscribed"
        with sched.lease(gpus=2) as lease:
            job = sched.submit(simjob("--vram", "512", "--hold", "0.1"), name="blocked", vram=512)
            with pytest.raises(Timeout):
                sched.wait_job("blocked", timeout=0.3)  # it does not start while the lease holds the GPUs
            blocked = sched.job("blocked")
            assert blocked.state == "queued" and blocked.attempts == []
        assert not lease.held
        for event in events:
            if event.type == "lease" and event.name == lease.id:
                assert event.lease is not None and event.lease.id == lease.id
                seen.append("released" if event.lease.released_at else "granted")
            elif event.type == "job" and event.name == "blocked":
                assert event.job is not None and event.job.id == job.id
                seen.append(event.job_state)
                if event.job_state == "done":
                    break
    assert seen == ["granted", "queued", "released", "starting", "running", "done"]


def test_lease_released_when_its_client_closes(sched: GpuSched, daemon: Daemon) -> None:
    other = GpuSched(daemon.socket)
    lease = other.acquire(gpus=2)
    assert [x.id for x in sched.leases()] == [lease.id]
    other.close()
    assert not lease.held and sched.leases() == []

    with GpuSched(daemon.socket) as scoped:
        scoped.acquire(gpus=2)
        assert len(sched.leases()) == 1
    assert sched.leases() == []


def test_lease_released_when_its_process_dies(sched: GpuSched, daemon: Daemon) -> None:
    script = (
        "import sys, gpusched\n"
        "lease = gpusched.GpuSched(sys.argv[1]).acquire(gpus=2)\n"
        "print(lease.id, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(SDK_DIR)}
    child: Optional[subprocess.Popen[str]] = None
    with guarded(sched.events()) as events:
        assert next(events).type == "subscribed"
        child = subprocess.Popen(
            [sys.executable, "-c", script, daemon.socket],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        )
        try:
            assert child.stdout is not None
            lease_id = child.stdout.readline().strip()
            assert [x.id for x in sched.leases()] == [lease_id]
        finally:
            child.kill()  # no release, no close: the kernel closes its socket
            child.wait()
        for event in events:
            if event.type == "lease" and event.name == lease_id and event.lease and event.lease.released_at:
                break
    assert sched.leases() == []


def test_acquire_that_does_not_fit(sched: GpuSched) -> None:
    with sched.lease(gpus=2) as held:
        with pytest.raises(ResourceExhausted) as at_once:
            sched.acquire(timeout=0)
        assert at_once.value.code == "resource_exhausted"
        assert str(at_once.value) == (
            "acquire 1 GPU: no_idle_gpu: needs 1 whole idle GPU; none is idle (pass a timeout to wait)"
        )
        with pytest.raises(ResourceExhausted):
            sched.acquire()  # no timeout: answered at once too
        with pytest.raises(Timeout) as waited:
            sched.acquire(timeout=0.2)
        assert waited.value.code == "timeout" and "waited 200ms" in str(waited.value)
        assert [x.id for x in sched.leases()] == [held.id]  # nothing left pending or held
    with pytest.raises(ResourceExhausted, match="can never be granted on this machine: needs 3 GPUs"):
        sched.acquire(gpus=3, timeout=10)
    with pytest.raises(InvalidArgument, match="not auto"):
        sched.acquire(min_free="auto")
    with pytest.raises(InvalidArgument, match="GPU 5 does not exist"):
        sched.acquire(gpu_ids=[5])
    with pytest.raises(InvalidArgument, match="is not a duration"):
        sched.acquire(timeout="soon")
    assert sched.leases() == []
