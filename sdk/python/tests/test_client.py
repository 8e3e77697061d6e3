"""The SDK against a real gpuschedd on two simulated GPUs."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import List, Union

import pytest

from gpusched import (
    GPU,
    PROTOCOL_VERSION,
    Conflict,
    DaemonNotRunning,
    Exists,
    GpuSched,
    InvalidArgument,
    NotFound,
    Process,
    ProcessGPU,
    Status,
    Timeout,
    UnknownMethod,
)
from harness import Daemon, guarded

GPU1 = "GPU-5a1d0000-0000-4000-8000-000000000001"
PATH_ENV = {"PATH": "/usr/bin:/bin"}


def is_aware(value: Union[datetime, None]) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


def test_hello(sched: GpuSched) -> None:
    hello = sched.hello()
    assert hello.protocol == PROTOCOL_VERSION
    assert hello.backend == "sim"
    assert {"run", "logs.follow", "events"} <= set(hello.capabilities)
    assert (hello.caller.uid, hello.caller.user, hello.caller.pid) == (0, "root", os.getpid())


def test_status_overview_and_gpus(sched: GpuSched) -> None:
    status = sched.status()
    assert isinstance(status, Status)
    assert (status.protocol, status.backend, status.processes, status.states) == (PROTOCOL_VERSION, "sim", 0, {})
    assert is_aware(status.started_at) and status.uptime_seconds >= 0
    assert [(g.index, g.total_mib, g.free_mib) for g in status.gpus] == [(0, 24576, 24576), (1, 24576, 24576)]

    gpus = sched.gpus()
    assert all(isinstance(g, GPU) for g in gpus)
    assert [(g.index, g.uuid, g.total_mib, g.used_mib, g.processes) for g in gpus][1] == (1, GPU1, 24576, 0, [])


def test_processes_empty(sched: GpuSched) -> None:
    assert sched.processes() == []


def test_lifecycle_round_trip(sched: GpuSched) -> None:
    started = sched.run("sleeper", ["sleep", "1000"], gpu=1, env=PATH_ENV)
    assert isinstance(started, Process)
    assert (started.name, started.state, started.user, started.uid, started.cmd) == ("sleeper", "running", "root", 0, ["sleep", "1000"])
    assert started.pid > 0 and started.init_pid > 0 and started.pid != started.init_pid
    assert started.dir == os.getcwd()
    assert started.gpus == [ProcessGPU(index=1, uuid=GPU1, used_mib=0)]
    assert started.log.endswith("sleeper.log")
    assert is_aware(started.created_at) and is_aware(started.started_at)
    assert started.exited_at is None and started.exit is None

    assert sched.status("sleeper") == started
    assert [p.name for p in sched.processes()] == ["sleeper"]
    assert sched.processes(user="nobody") == []
    assert sched.status().states == {"running": 1}

    with pytest.raises(Exists) as exists:
        sched.run("sleeper", ["true"])
    assert exists.value.code == "exists" and "sleeper" in str(exists.value)
    with pytest.raises(Conflict) as conflict:
        sched.rm("sleeper")
    assert str(conflict.value) == 'process "sleeper" is running; kill it before rm'

    killed = sched.kill("sleeper")
    assert (killed.id, killed.state, killed.exit and killed.exit.signal) == (started.id, "exited", "SIGTERM")
    assert killed.exit is not None and killed.exit.code is None and is_aware(killed.exited_at)
    assert sched.wait("sleeper") == killed
    with pytest.raises(Conflict):
        sched.kill("sleeper")

    assert sched.rm("sleeper").id == started.id
    assert sched.processes() == []
    with pytest.raises(NotFound):
        sched.status("sleeper")


def test_exit_code_and_logs(sched: GpuSched) -> None:
    sched.run("echo", ["sh", "-c", "echo one; echo two >&2; exit 3"], dir="/")
    done = sched.wait("echo")
    assert done.exit is not None and (done.exit.code, done.exit.signal, done.dir) == (3, "", "/")
    assert sched.logs("echo") == ["one", "two"]
    assert sched.logs("echo", lines=1) == ["two"]


def test_environment_is_only_what_was_asked(sched: GpuSched) -> None:
    sched.run("bare", ["env"])
    sched.run("given", ["env"], env={"COLOUR": "red"})
    sched.wait("bare")
    sched.wait("given")
    bare = sched.logs("bare")
    assert "GPUSCHED_NAME=bare" in bare
    assert all(line.startswith(("GPUSCHED_", "CUDA_")) for line in bare), bare
    assert "COLOUR=red" in sched.logs("given")


def test_errors(sched: GpuSched) -> None:
    with pytest.raises(NotFound) as not_found:
        sched.status("nope")
    assert (not_found.value.code, str(not_found.value)) == ("not_found", 'process "nope" not found')
    with pytest.raises(InvalidArgument) as invalid:
        sched.run("../etc", ["true"])
    assert invalid.value.code == "invalid_argument" and "only letters, digits" in str(invalid.value)
    with pytest.raises(NotFound):
        sched.kill("nope", grace=1)
    with pytest.raises(UnknownMethod):
        sched.call("frobnicate")
    with pytest.raises(InvalidArgument, match="cannot be sent as JSON"):
        sched.run("x", ["true"], env={"COLOUR": object()})  # type: ignore[dict-item]
    sched.run("sleeper", ["sleep", "1000"])
    with pytest.raises(Timeout) as timeout:
        sched.wait("sleeper", timeout=0.05)
    assert timeout.value.code == "timeout"
    assert sched.status("sleeper").state == "running"  # the main connection is still fine


def test_names_are_per_user(sched: GpuSched) -> None:
    """Root's process and nobody's share a name: each is its own, and root names nobody's as nobody/NAME."""
    sched.run("twin", ["sleep", "1000"], dir="/")
    sched.run("twin", ["sleep", "1000"], dir="/", user="nobody")
    assert sched.status("twin").user == "root"
    theirs = sched.status("nobody/twin")
    assert (theirs.name, theirs.user) == ("twin", "nobody")
    with pytest.raises(Exists):
        sched.run("twin", ["true"], dir="/", user="nobody")
    sched.kill("nobody/twin", grace=1)
    assert sched.status("twin").state == "running"


def test_events_see_another_clients_process(sched: GpuSched, daemon: Daemon) -> None:
    other = GpuSched(daemon.socket)
    states: List[str] = []
    with guarded(sched.events()) as events:
        first = next(events)
        assert (first.type, first.name, is_aware(first.time)) == ("subscribed", "", True)
        other.run("job", ["sleep", "1000"])
        for event in events:
            assert event.type == "process" and event.name == "job" and event.process is not None
            assert event.process.name == "job" and event.seq > 0
            states.append(event.state)
            if event.state == "running":
                other.kill("job", signal=signal.SIGKILL)
            if event.state == "exited":
                assert event.prev_state == "running"
                assert event.process.exit is not None and event.process.exit.signal == "SIGKILL"
                break
    other.close()
    assert states == ["starting", "running", "exited"]


def test_follow_logs_until_exit(sched: GpuSched, daemon: Daemon) -> None:
    fifo = daemon.dir / "fifo"
    os.mkfifo(fifo)
    sched.run("talker", ["sh", "-c", f"echo first; cat {fifo}; echo last"])
    with guarded(sched.follow_logs("talker")) as lines:
        assert next(lines) == "first"
        with open(fifo, "w") as pipe:  # cat is reading it by now: it runs after "echo first"
            pipe.write("middle\n")
        assert list(lines) == ["middle", "last"]
        assert lines.result == {"name": "talker", "lines": []}
    assert sched.status("talker").exit.code == 0  # type: ignore[union-attr]


def test_stream_low_level_and_main_connection_stays_usable(sched: GpuSched) -> None:
    sched.run("once", ["sh", "-c", "echo a"])
    sched.wait("once")
    with guarded(sched.stream("logs", {"name": "once", "follow": True})) as stream:
        assert list(stream) == [{"type": "log", "name": "once", "line": "a"}]
    assert stream.result == {"name": "once", "lines": []}

    with guarded(sched.events("once")) as events:
        assert next(events).type == "subscribed"
        assert sched.status("once").state == "exited"
        sched.rm("once")
        removed = next(events)
        assert (removed.type, removed.name) == ("removed", "once")

    with pytest.raises(NotFound):
        list(sched.follow_logs("nope"))


def test_close_ends_open_streams(sched: GpuSched) -> None:
    events = sched.events()
    assert next(events).type == "subscribed"
    sched.close()
    assert list(events) == []
    assert sched.status().processes == 0  # a later call connects again

    with sched.events() as blocked:
        assert next(blocked).type == "subscribed"
        threading.Thread(target=blocked.close).start()
        assert list(blocked) == []  # close() from another thread wakes the reader


def test_reconnects_after_daemon_restart(sched: GpuSched, daemon: Daemon) -> None:
    sched.run("survivor", ["sleep", "1000"])
    daemon.stop()
    daemon.start()
    assert sched.status("survivor").state == "running"  # same object, new connection

    daemon.stop()
    with pytest.raises(DaemonNotRunning):
        sched.status()
    daemon.start()
    assert sched.status().processes == 1


def test_thread_safety(sched: GpuSched) -> None:
    sched.run("held", ["sleep", "1000"])

    def calls(thread: int) -> None:
        for _ in range(50):
            if thread % 2:
                assert sched.status("held").name == "held"
            else:
                assert sched.status().processes == 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(calls, thread) for thread in range(8)]:
            future.result()
