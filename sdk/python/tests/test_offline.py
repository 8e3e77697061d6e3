"""What needs no daemon: error mapping, result types, socket resolution, and the
connection's behaviour against a scripted fake daemon."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

import gpusched
from gpusched import (
    DEFAULT_SOCKET,
    CheckpointResult,
    ConnectionLost,
    DaemonNotRunning,
    Event,
    ForkResult,
    GpuSched,
    GpuSchedError,
    HibernateResult,
    Policy,
    Process,
    ProtocolError,
    Snapshot,
    Status,
    SwapResult,
    Timeout,
    socket_path,
)
from gpusched.errors import error_from_wire
from gpusched.types import parse_duration, parse_time

CODES = {
    "bad_request": gpusched.BadRequest,
    "unknown_method": gpusched.UnknownMethod,
    "invalid_argument": gpusched.InvalidArgument,
    "too_large": gpusched.TooLarge,
    "not_found": gpusched.NotFound,
    "exists": gpusched.Exists,
    "permission_denied": gpusched.PermissionDenied,
    "conflict": gpusched.Conflict,
    "timeout": gpusched.Timeout,
    "unavailable": gpusched.Unavailable,
    "resource_exhausted": gpusched.ResourceExhausted,
    "internal": gpusched.Internal,
}

HELLO = {"ok": True, "result": {"protocol": gpusched.PROTOCOL_VERSION, "version": "test"}}


@pytest.mark.parametrize("code", sorted(CODES))
def test_error_from_wire(code: str) -> None:
    error = error_from_wire(code, "it went wrong")
    assert type(error) is CODES[code]
    assert (error.code, error.message, str(error)) == (code, "it went wrong", "it went wrong")


def test_unknown_code_gives_the_base_class() -> None:
    error = error_from_wire("from_the_future", "new")
    assert type(error) is GpuSchedError and error.code == "from_the_future"


def test_parse_time() -> None:
    assert parse_time("2026-11-21T06:06:14.725941588Z") == datetime(2026, 11, 21, 6, 6, 14, 725941, timezone.utc)
    assert parse_time("2026-11-21T08:06:14+02:00") == datetime(2026, 11, 21, 6, 6, 14, tzinfo=timezone.utc)
    assert parse_time("2026-11-21T06:06:14.5-01:30").utcoffset() == -timedelta(hours=1, minutes=30)  # type: ignore[union-attr]
    assert parse_time(None) is None and parse_time("") is None
    for bad in ("2026-11-21", "2026-13-21T06:06:14Z", "yesterday"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_from_dict_is_forward_compatible() -> None:
    wire = {
        "name": "train", "state": "frozen", "pid": 12, "cmd": ["python3"], "gpus": [{"index": 0, "used_mib": 5, "new": 1}],
        "created_at": "2026-01-02T03:04:05Z", "exit": {"code": 0}, "snapshot": {"tier": "ram"},
    }
    process = Process.from_dict(wire)
    assert (process.name, process.state, process.pid, process.cmd) == ("train", "frozen", 12, ["python3"])
    assert process.gpus[0].used_mib == 5 and process.gpus[0].raw["new"] == 1
    assert process.exit is not None and process.exit.code == 0
    assert process.raw == wire and process.raw["snapshot"] == {"tier": "ram"}
    assert process.started_at is None and process.user == ""

    event = Event.from_dict({"type": "log", "line": "hi", "shiny": True})
    assert (event.type, event.line, event.process, event.time) == ("log", "hi", None, None)


def test_socket_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSCHED_SOCKET", raising=False)
    assert socket_path() == DEFAULT_SOCKET == GpuSched().socket_path
    monkeypatch.setenv("GPUSCHED_SOCKET", "/run/elsewhere.sock")
    assert GpuSched().socket_path == "/run/elsewhere.sock"
    assert GpuSched("/tmp/explicit.sock").socket_path == "/tmp/explicit.sock"


def test_daemon_not_running(tmp_short: Path) -> None:
    missing = str(tmp_short / "gs.sock")
    with pytest.raises(DaemonNotRunning) as caught:
        GpuSched(missing).status()
    error = caught.value
    assert isinstance(error, ConnectionError) and isinstance(error, GpuSchedError)
    # A daemon for another socket is started with that socket.
    for hint in (missing, f"gpuschedd --socket {missing} --sim 1", "GPUSCHED_SOCKET"):
        assert hint in str(error)

    refusing = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    refusing.bind(missing)  # a socket file nobody listens on: a daemon that died
    refusing.close()
    with pytest.raises(DaemonNotRunning):
        GpuSched(missing).hello()


SILENT: Dict[str, Any] = {}


class FakeDaemon:
    """Answers each request line with ``answer(request)``: a reply dict to send,
    SILENT to send nothing, or None to hang up. Records every request. Each
    connection is served by a thread of its own."""

    def __init__(self, directory: Path, answer: Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]) -> None:
        self.path = str(directory / "fake.sock")
        self.requests: List[Dict[str, Any]] = []
        self._answer = answer
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as lines:
            for line in lines:
                request = json.loads(line)
                self.requests.append(request)
                reply = self._answer(request)
                if reply is None:
                    break
                if reply is not SILENT:
                    try:
                        lines.write(json.dumps({"id": request["id"], **reply}).encode() + b"\n")
                        lines.flush()
                    except OSError:
                        return  # the client gave up waiting and hung up

    def methods(self) -> List[str]:
        return [r["method"] for r in self.requests]

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()


def test_protocol_mismatch_is_refused(tmp_short: Path) -> None:
    fake = FakeDaemon(tmp_short, lambda request: {"ok": True, "result": {"protocol": 2, "version": "9.0"}})
    with pytest.raises(ProtocolError, match="speaks protocol 2"):
        GpuSched(fake.path).status()
    fake.close()


def test_a_request_that_may_have_run_is_never_resent(tmp_short: Path) -> None:
    fake = FakeDaemon(tmp_short, lambda request: HELLO if request["method"] == "hello" else None)
    sched = GpuSched(fake.path)
    with pytest.raises(ConnectionLost, match="may or may not have taken effect"):
        sched.call("rm", {"name": "x"})
    assert fake.methods() == ["hello", "rm"]
    fake.close()


def test_a_refused_connection_says_why(tmp_short: Path) -> None:
    """A daemon past a connection cap answers a new connection with one error line and closes
    it; a request that can then no longer be sent fails with that error."""
    path = str(tmp_short / "refusing.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    conn = gpusched.client._Connection(path, 5.0)
    refused, _ = listener.accept()
    refused.sendall(b'{"ok":false,"error":"user alice has 4 connections open, the most '
                    b'--max-conns-per-user allows","code":"resource_exhausted"}\n')
    refused.close()
    listener.close()
    with pytest.raises(gpusched.ResourceExhausted, match="--max-conns-per-user"):
        gpusched.client._send(conn, "hello", None, 5.0)


def test_client_timeout(tmp_short: Path) -> None:
    fake = FakeDaemon(tmp_short, lambda request: HELLO if request["method"] == "hello" else SILENT)
    with pytest.raises(Timeout, match="within 0.05s") as caught:
        GpuSched(fake.path, timeout=0.05).status()
    assert caught.value.code is None
    fake.close()


def test_unreadable_answer(tmp_short: Path) -> None:
    fake = FakeDaemon(tmp_short, lambda request: HELLO if request["method"] == "hello" else {"ok": True, "result": {"gpus": [7]}})
    with pytest.raises(ProtocolError):
        GpuSched(fake.path).gpus()
    fake.close()


def test_older_daemons_answers_still_parse() -> None:
    process = Process.from_dict({"name": "train", "state": "running", "created_at": "2026-01-02T03:04:05Z"})
    assert (process.tier, process.host_mib, process.frozen_at, process.error) == ("", 0, None, "")
    status = Status.from_dict({"version": "0.1", "protocol": 1, "states": {"running": 1}})
    assert (status.host_mib, status.ram_budget_mib, status.driver, status.jobs, status.leases) == (0, 0, "", {}, 0)
    status = Status.from_dict({"jobs": {"queued": 2, "done": 1}, "leases": 1})
    assert (status.jobs, status.leases) == ({"queued": 2, "done": 1}, 1)


def test_checkpoint_types() -> None:
    frozen = Process.from_dict({"name": "p", "state": "frozen", "tier": "host", "host_mib": 500,
                                "frozen_at": "2026-01-02T03:04:05.5Z", "error": ""})
    assert (frozen.tier, frozen.host_mib) == ("host", 500)
    assert frozen.frozen_at == datetime(2026, 1, 2, 3, 4, 5, 500000, timezone.utc)
    status = Status.from_dict({"host_mib": 500, "ram_budget_mib": 65536, "driver": "api"})
    assert (status.host_mib, status.ram_budget_mib, status.driver) == (500, 65536, "api")

    half = {"name": "policy", "op": "freeze", "state": "frozen", "driver": "sim", "pids": [12], "bytes": 3 << 20,
            "gpus": ["GPU-0"], "ms": {"lock": 1.5, "total": 9}, "future": True}
    result = CheckpointResult.from_dict(half)
    assert (result.name, result.op, result.state, result.driver) == ("policy", "freeze", "frozen", "sim")
    assert (result.pids, result.bytes, result.mib, result.gpus, result.ms) == ([12], 3 << 20, 3, ["GPU-0"], {"lock": 1.5, "total": 9})
    assert result.raw == half

    swap = SwapResult.from_dict({"freeze": half, "thaw": {**half, "name": "reward", "op": "thaw"}, "concurrent": True, "ms": {"total": 20}})
    assert (swap.freeze, swap.thaw.name, swap.thaw.op, swap.concurrent, swap.ms) == (result, "reward", "thaw", True, {"total": 20})
    assert SwapResult.from_dict({}) == SwapResult()
    assert CheckpointResult.from_dict({}).pids == []


def test_checkpoint_params_on_the_wire(tmp_short: Path) -> None:
    answers = {"swap": {"freeze": {"name": "policy"}, "thaw": {"name": "reward"}}}
    fake = FakeDaemon(tmp_short, lambda request: HELLO if request["method"] == "hello" else
                      {"ok": True, "result": answers.get(request["method"], {"name": request["params"].get("name")})})
    with GpuSched(fake.path) as sched:
        assert sched.freeze("policy").name == "policy"
        sched.freeze("policy", lock_timeout=2.5, stop=False)
        assert sched.thaw("reward").name == "reward"
        sched.thaw("reward", timeout=1.5)
        swapped = sched.swap("policy", "reward")
        assert (swapped.freeze.name, swapped.thaw.name) == ("policy", "reward")
        sched.swap("policy", "reward", timeout=3)
        sched.migrate("train", 1)
        sched.migrate("train", "GPU-x", timeout=0.5)
        sched.migrate("train", [1, "GPU-y"])
        sched.migrate("train", (0,))
    fake.close()
    assert [(r["method"], r.get("params")) for r in fake.requests if r["method"] != "hello"] == [
        ("freeze", {"name": "policy"}),
        ("freeze", {"name": "policy", "lock_timeout": 2.5, "stop": False}),
        ("thaw", {"name": "reward"}),
        ("thaw", {"name": "reward", "timeout": 1.5}),
        ("swap", {"freeze": "policy", "thaw": "reward"}),
        ("swap", {"freeze": "policy", "thaw": "reward", "timeout": 3}),
        ("migrate", {"name": "train", "gpu": 1}),
        ("migrate", {"name": "train", "gpu": "GPU-x", "timeout": 0.5}),
        ("migrate", {"name": "train", "gpus": [1, "GPU-y"]}),
        ("migrate", {"name": "train", "gpus": [0]}),
    ]


def test_waits_extend_the_client_timeout(tmp_short: Path) -> None:
    def slow(request: Dict[str, Any]) -> Dict[str, Any]:
        if request["method"] == "hello":
            return HELLO
        if not {"timeout", "lock_timeout"} & set(request["params"]):
            return SILENT
        time.sleep(0.3)  # the daemon waiting for GPU memory or in-flight CUDA work
        return {"ok": True, "result": {"name": "x", "op": request["method"]}}

    fake = FakeDaemon(tmp_short, slow)
    sched = GpuSched(fake.path, timeout=0.1)
    assert sched.thaw("x", timeout=5).op == "thaw"
    assert sched.freeze("x", lock_timeout=5).op == "freeze"
    assert sched.migrate("x", 1, timeout=5).op == "migrate"
    with pytest.raises(Timeout, match="within 0.1s"):
        sched.thaw("x")  # no wait asked for: the client's own timeout applies
    sched.close()
    fake.close()


@pytest.mark.parametrize("wire, seconds", [
    ("10m0s", 600.0), ("1h30m0s", 5400.0), ("1.5s", 1.5), ("500ms", 0.5), ("0s", 0.0), ("0", 0.0),
    ("2\u00b5s", 2e-06), ("-1m", -60.0), (30, 30.0), (0.25, 0.25),
])
def test_parse_duration(wire: object, seconds: float) -> None:
    assert parse_duration(wire) == pytest.approx(seconds)


@pytest.mark.parametrize("wire", ["", "soon", "10", "1x", "1h-", True, None, []])
def test_parse_duration_refuses(wire: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(wire)


def test_disk_types() -> None:
    process = Process.from_dict({"name": "warm", "state": "hibernated", "tier": "disk", "snapshot": "s1",
                                 "policy": {"priority": -5, "pin": True, "ttl": "10m0s", "idle": "30s"}})
    assert (process.state, process.tier, process.snapshot) == ("hibernated", "disk", "s1")
    assert process.policy == Policy(priority=-5, pin=True, ttl=600.0, idle=30.0)
    assert Process.from_dict({"name": "old"}).policy == Policy()  # an older daemon
    assert Process.from_dict({"policy": {"priority": 0, "pin": False}}).policy == Policy()  # zero durations are left out
    with pytest.raises(ValueError):
        Process.from_dict({"policy": {"ttl": "soon"}})

    status = Status.from_dict(
        {"disk_bytes": 5 << 20, "disk_budget": 1 << 30, "disk_free": 9 << 30, "disk_keep_free": 1 << 30, "criu": "4.1.1"}
    )
    assert (status.disk_bytes, status.disk_budget, status.criu) == (5 << 20, 1 << 30, "4.1.1")
    assert (status.disk_free, status.disk_keep_free) == (9 << 30, 1 << 30)
    assert CheckpointResult.from_dict({"op": "thaw", "snapshot": "s1"}).snapshot == "s1"

    wire = {"name": "warm", "state": "hibernated", "snapshot": "s2", "parent": "s1", "bytes": 700, "written": 600,
            "pages": 17000, "reused": 16900, "gpu_bytes": 256 << 20, "ms": {"dump": 300, "total": 310}}
    hibernated = HibernateResult.from_dict(wire)
    assert (hibernated.snapshot, hibernated.parent, hibernated.written, hibernated.reused) == ("s2", "s1", 600, 16900)
    assert hibernated.raw == wire and HibernateResult.from_dict({}) == HibernateResult()

    forked = ForkResult.from_dict({"name": "src", "copies": [{"name": "src-1", "state": "running"}], "bytes": 9, "ms": {"total": 1}})
    assert ([(c.name, c.state) for c in forked.copies], forked.bytes) == ([("src-1", "running")], 9)
    snapshot = Snapshot.from_dict({"id": "s1", "name": "warm", "holds": True, "gpus": ["GPU-0"], "created_at": "2026-01-02T03:04:05Z"})
    assert (snapshot.id, snapshot.holds, snapshot.gpus, snapshot.parent) == ("s1", True, ["GPU-0"], "")
    assert snapshot.created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc) and snapshot.last_used_at is None


def test_disk_params_on_the_wire(tmp_short: Path) -> None:
    answers: Dict[str, Any] = {"snapshots": {"snapshots": [{"id": "s1"}], "bytes": 1, "budget": 0}, "fork": {"copies": []}}
    fake = FakeDaemon(tmp_short, lambda request: HELLO if request["method"] == "hello" else
                      {"ok": True, "result": answers.get(request["method"], {"name": (request.get("params") or {}).get("name")})})
    with GpuSched(fake.path) as sched:
        assert sched.hibernate("warm").name == "warm"
        sched.hibernate("warm", full=True, lock_timeout=2.5)
        assert sched.fork("warm", 2).copies == []
        sched.fork("warm", 2, gpus=[0, "GPU-x"], timeout=1.5)
        assert [s.id for s in sched.snapshots()] == ["s1"]
        sched.snapshots("warm")
        sched.delete_snapshot("s1")
        sched.set_policy("warm")
        sched.set_policy("warm", priority=0, pin=False, ttl=0, idle="10m")
        sched.run("warm", ["true"], dir="/")
        sched.run("warm", ["true"], dir="/", priority=-3, pin=True, ttl=600, idle="1h")
    fake.close()
    assert [(r["method"], r.get("params")) for r in fake.requests if r["method"] != "hello"] == [
        ("hibernate", {"name": "warm"}),
        ("hibernate", {"name": "warm", "lock_timeout": 2.5, "full": True}),
        ("fork", {"name": "warm", "copies": 2}),
        ("fork", {"name": "warm", "copies": 2, "gpus": [0, "GPU-x"], "timeout": 1.5}),
        ("snapshots", None),
        ("snapshots", {"name": "warm"}),
        ("delete_snapshot", {"id": "s1"}),
        ("set", {"name": "warm"}),
        ("set", {"name": "warm", "priority": 0, "pin": False, "ttl": 0, "idle": "10m"}),
        ("run", {"name": "warm", "cmd": ["true"], "dir": "/"}),
        ("run", {"name": "warm", "cmd": ["true"], "dir": "/", "priority": -3, "pin": True, "ttl": 600, "idle": "1h"}),
    ]


JOB_WIRE: Dict[str, Any] = {
    "id": "j4", "name": "train", "state": "done", "user": "root", "uid": 0, "cmd": ["python3", "train.py"], "dir": "/",
    "vram": 18432, "vram_mib": 20480, "gpus": 1, "priority": 5, "timeout": "2h0m0s", "retries": 2, "retries_left": 1,
    "preemptible": True, "submitted_at": "2026-11-21T07:25:53.661740301Z", "started_at": "2026-11-21T07:25:54Z",
    "ended_at": "2026-11-21T07:26:00Z", "exit": {"code": 0},
    "attempts": [
        {"n": 1, "gpus": ["GPU-0"], "vram_mib": 18432, "started_at": "2026-11-21T07:25:53.7Z", "ended_at": "2026-11-21T07:25:53.9Z",
         "exit": {"code": 1}, "peak_mib": {"GPU-0": 19000}, "oom": True, "outcome": "oom"},
        {"n": 2, "gpus": ["GPU-0"], "vram_mib": 20480, "started_at": "2026-11-21T07:25:54Z", "ended_at": "2026-11-21T07:26:00Z",
         "exit": {"code": 0}, "peak_mib": {"GPU-0": 19500}, "preempted": 1, "preempted_for": "1.5s", "outcome": "done"},
    ],
    "peak_mib": {"GPU-0": 19500}, "verdict": "fits", "process": "train", "from_the_future": 1,
}


def test_queue_types() -> None:
    job = gpusched.Job.from_dict(JOB_WIRE)
    assert (job.id, job.name, job.state, job.finished, job.cmd, job.vram, job.vram_mib) == (
        "j4", "train", "done", True, ["python3", "train.py"], 18432, 20480)
    assert (job.timeout, job.retries, job.retries_left, job.preemptible, job.verdict, job.process) == (
        7200.0, 2, 1, True, "fits", "train")
    assert job.exit == gpusched.Exit(code=0) and job.peak_mib == {"GPU-0": 19500} and job.raw == JOB_WIRE
    assert job.submitted_at == datetime(2026, 11, 21, 7, 25, 53, 661740, timezone.utc)
    first, second = job.attempts
    assert (first.n, first.oom, first.outcome, first.exit, first.preempted, first.preempted_for) == (
        1, True, "oom", gpusched.Exit(code=1), 0, 0.0)
    assert (second.preempted, second.preempted_for, second.peak_mib) == (1, 1.5, {"GPU-0": 19500})
    assert isinstance(second, gpusched.Attempt) and second.ended_at == datetime(2026, 11, 21, 7, 26, tzinfo=timezone.utc)

    queued = gpusched.Job.from_dict({"id": "j5", "state": "queued", "vram": None, "attempts": [], "peak_mib": {}})
    assert (queued.vram, queued.timeout, queued.started_at, queued.exit, queued.finished) == (None, 0.0, None, None, False)
    assert gpusched.Job.from_dict({"vram": "auto"}).vram == "auto"
    assert gpusched.Job.from_dict({}) == gpusched.Job()
    assert set(gpusched.JOB_FINAL_STATES) < set(gpusched.JOB_STATES)
    with pytest.raises(ValueError):
        gpusched.Job.from_dict({"vram": True})

    lease_wire = {"id": "l3", "gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1"}],
                  "cuda_visible_devices": "GPU-0,GPU-1", "mib": 20480, "user": "ana", "uid": 1000,
                  "acquired_at": "2026-11-21T07:25:57Z", "_holder": "from the wire"}
    lease = gpusched.Lease.from_dict(lease_wire)
    assert (lease.id, lease.gpu_ids, lease.uuids, lease.mib, lease.user, lease.uid) == ("l3", [0, 1], ["GPU-0", "GPU-1"], 20480, "ana", 1000)
    assert lease.gpus[1] == gpusched.LeaseGPU(index=1, uuid="GPU-1") and lease.released_at is None
    assert not lease.held and lease.raw == lease_wire  # not from a client: nothing holds it
    with pytest.raises(gpusched.InvalidArgument, match="GpuSched.release"):
        lease.release()
    env: Dict[str, str] = {}
    assert lease.apply(env) == "GPU-0,GPU-1" and env == {"CUDA_VISIBLE_DEVICES": "GPU-0,GPU-1"}

    event = Event.from_dict({"time": "2026-11-21T07:25:57Z", "type": "job", "name": "train", "prev_state": "running",
                             "job_state": "done", "job": JOB_WIRE})
    assert (event.type, event.job_state, event.prev_state, event.job, event.warning, event.lease) == (
        "job", "done", "running", job, "", None)
    released = Event.from_dict({"type": "lease", "name": "l3", "lease": {**lease_wire, "released_at": "2026-11-21T07:26:57Z"}})
    assert released.lease is not None and released.lease.id == "l3" and released.lease.released_at is not None

    process = Process.from_dict({"name": "train", "job": "j4", "preempted_by": "j9"})
    assert (process.job, process.preempted_by) == ("j4", "j9")
    assert (Process.from_dict({"name": "old"}).job, Process.from_dict({}).preempted_by) == ("", "")


def test_queue_params_on_the_wire(tmp_short: Path) -> None:
    lease = {"id": "l1", "gpus": [{"index": 0, "uuid": "GPU-0"}], "cuda_visible_devices": "GPU-0", "mib": 0}

    def answer(request: Dict[str, Any]) -> Dict[str, Any]:
        method, params = request["method"], request.get("params") or {}
        if method == "hello":
            return HELLO
        if method == "submit":
            specs = params.get("jobs") or [params]
            return {"ok": True, "result": {"jobs": [{"name": s.get("name", "")} for s in specs]}}
        if method in ("jobs", "leases"):
            return {"ok": True, "result": {method: []}}
        if method == "acquire":
            return {"ok": True, "result": lease}
        return {"ok": True, "result": {"name": params.get("name", "")}}

    fake = FakeDaemon(tmp_short, answer)
    cwd = os.getcwd()
    with GpuSched(fake.path) as sched:
        assert sched.submit(["true"]).name == ""
        sched.submit(["true"], name="t", vram="18G", gpus=2, priority=-3, timeout="2h", retries=1,
                     preemptible=True, dir="/", env={"A": "b"}, user="ana")
        sched.submit(["true"], vram=512, timeout=90, nice=5, mps_threads=50, mps_mem_limit="4G")
        assert [j.name for j in sched.submit_many([{"cmd": ["a"], "name": "a"}, {"cmd": ("b",), "vram": None, "gpus": 2}])] == ["a", ""]
        assert sched.jobs() == [] and sched.jobs(state="done", all=True, user="ana") == []
        sched.job("t")
        sched.cancel("j3")
        sched.wait_job("t", timeout=5)
        acquired = sched.acquire(gpus=2, min_free="20G", max_util=10, max_power=300.5, gpu_ids=[0, "GPU-1"], timeout="10m", priority=4, max_temp=85)
        assert acquired.held and acquired.gpu_ids == [0]
        assert dataclasses.asdict(acquired)["gpus"] == [{"index": 0, "uuid": "GPU-0", "raw": {"index": 0, "uuid": "GPU-0"}}]
        acquired.release()
        sched.acquire().release()
        sched.release("l7")  # not this client's: by id on the main connection
        assert sched.leases() == []
    fake.close()
    assert [(r["method"], r.get("params")) for r in fake.requests if r["method"] != "hello"] == [
        ("submit", {"cmd": ["true"], "dir": cwd}),
        ("submit", {"cmd": ["true"], "dir": "/", "name": "t", "env": {"A": "b"}, "vram": "18G", "gpus": 2, "priority": -3,
                    "timeout": "2h", "retries": 1, "preemptible": True, "user": "ana"}),
        ("submit", {"cmd": ["true"], "dir": cwd, "vram": 512, "timeout": 90, "nice": 5, "mps_threads": 50,
                    "mps_mem_limit": "4G"}),
        ("submit", {"jobs": [{"cmd": ["a"], "dir": cwd, "name": "a"}, {"cmd": ["b"], "dir": cwd, "gpus": 2}]}),
        ("jobs", None),
        ("jobs", {"state": "done", "all": True, "user": "ana"}),
        ("job", {"name": "t"}),
        ("cancel", {"name": "j3"}),
        ("job_wait", {"name": "t", "timeout": 5}),
        ("acquire", {"gpus": 2, "min_free": "20G", "max_util": 10, "max_power": 300.5, "gpu_ids": [0, "GPU-1"],
                     "timeout": "10m", "priority": 4, "max_temp": 85}),
        ("release", {"id": "l1"}),
        ("acquire", {"gpus": 1}),
        ("release", {"id": "l1"}),
        ("release", {"id": "l7"}),
        ("leases", None),
    ]


def test_acquire_waits_extend_the_client_timeout(tmp_short: Path) -> None:
    def slow(request: Dict[str, Any]) -> Dict[str, Any]:
        if request["method"] == "hello":
            return HELLO
        if request["method"] == "acquire" and "timeout" in request["params"]:
            time.sleep(0.3)  # the daemon waiting for GPUs to fit
            return {"ok": True, "result": {"id": "l1"}}
        return SILENT

    fake = FakeDaemon(tmp_short, slow)
    sched = GpuSched(fake.path, timeout=0.1)
    lease = sched.acquire(timeout="5s")
    assert lease.id == "l1"
    with pytest.raises(Timeout, match="within 0.1s"):
        sched.acquire()  # no wait asked for: the client's own timeout applies
    lease.release()  # the daemon does not answer: closing its connection ends the lease all the same
    assert not lease.held
    sched.close()
    fake.close()


BAD_ARGUMENTS: Dict[str, Callable[[GpuSched], Any]] = {
    "run with a string cmd": lambda s: s.run("x", "sleep 1"),
    "run without cmd": lambda s: s.run("x", None),  # type: ignore[arg-type]
    "run with a number in cmd": lambda s: s.run("x", ["sleep", 1]),  # type: ignore[list-item]
    "run with env as a list": lambda s: s.run("x", ["true"], env=[("A", "b")]),  # type: ignore[arg-type]
    "run with gpus as a number": lambda s: s.run("x", ["true"], gpus=3),  # type: ignore[arg-type]
    "migrate to None": lambda s: s.migrate("x", None),  # type: ignore[arg-type]
    "fork onto a number": lambda s: s.fork("x", 2, gpus=1),  # type: ignore[arg-type]
    "submit without cmd": lambda s: s.submit(None),  # type: ignore[arg-type]
    "submit_many of a number": lambda s: s.submit_many([1]),  # type: ignore[list-item]
    "submit_many of a string": lambda s: s.submit_many("abc"),  # type: ignore[arg-type]
    "acquire with gpu_ids as a number": lambda s: s.acquire(gpu_ids=3),  # type: ignore[arg-type]
    "activate None": lambda s: s.activate(None),  # type: ignore[arg-type]
    "activate evicting a string": lambda s: s.activate("x", evict="abc"),
    "a duration that is none": lambda s: s.acquire(timeout="soon"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_are_refused_before_anything_is_sent(case: str, tmp_short: Path) -> None:
    """InvalidArgument with a sentence, never a TypeError: raised before connecting
    (the socket does not exist, so a connection attempt would raise DaemonNotRunning)."""
    with pytest.raises(gpusched.InvalidArgument) as refused:
        BAD_ARGUMENTS[case](GpuSched(str(tmp_short / "none.sock")))
    assert refused.value.message[0].islower() and len(refused.value.message) > 20
