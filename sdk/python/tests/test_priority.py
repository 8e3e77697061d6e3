"""gpusched.priority: nice on every thread, CUDA stream priority (with a stand-in torch), the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from gpusched import GpuSched
from gpusched.errors import Conflict, InvalidArgument
from gpusched.priority import (
    NICE_ENV,
    PRIORITY_ENV,
    PrioritySetting,
    PriorityWarning,
    auto_priority,
    inject_priority,
    priority,
)

SDK_DIR = str(Path(__file__).resolve().parents[1])
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="lowering nice below 0 (and back) needs root")
NO_TORCH = "CUDA stream priority not set"


def thread_nices() -> Dict[str, int]:
    """Each thread of this process (by /proc task name) and its nice, field 19 of its stat."""
    nices: Dict[str, int] = {}
    for name in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{name}/stat").read_text()
        except FileNotFoundError:
            continue
        nices[name] = int(stat.rsplit(")", 1)[1].split()[16])
    return nices


def set_all(nice: int) -> None:
    """Sets every thread of this process to ``nice``, as its own PID namespace numbers them."""
    for name in os.listdir("/proc/self/task"):
        try:
            status = Path(f"/proc/self/task/{name}/status").read_text()
            nspid = next(line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:"))
            os.setpriority(os.PRIO_PROCESS, int(nspid), nice)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def settable(nice: int) -> None:
    """Skips the test when this process cannot go to ``nice``: without root, a nice once raised stays."""
    if not ROOT and own_nice() > nice:
        pytest.skip(f"nice is {own_nice()} (an earlier test raised it) and only root can lower it to {nice}")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No GPUSCHED_* priority in the environment, and every thread back at its nice afterwards."""
    monkeypatch.delenv(PRIORITY_ENV, raising=False)
    monkeypatch.delenv(NICE_ENV, raising=False)
    start = own_nice()
    yield
    set_all(start)


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import torch`` fails, whether or not torch is installed."""
    monkeypatch.setitem(sys.modules, "torch", None)


@contextmanager
def parked_threads(count: int = 3) -> Iterator[List[threading.Thread]]:
    """``count`` threads blocked on an Event for the duration."""
    release = threading.Event()
    started = [threading.Thread(target=release.wait) for _ in range(count)]
    for thread in started:
        thread.start()
    try:
        yield started
    finally:
        release.set()
        for thread in started:
            thread.join()


class FakeTorch:
    """A stand-in ``torch`` with just the CUDA stream API the module uses; records every call."""

    def __init__(self, available: bool = True, priority_range: Optional[Tuple[int, int]] = (0, -3)) -> None:
        self.calls: List[Tuple[str, Any]] = []
        self.streams: List[Any] = []
        self.module = types.ModuleType("torch")
        fake = self

        class Stream:
            def __init__(self, device: Any = None, priority: int = 0) -> None:
                self.priority = priority
                fake.streams.append(self)
                fake.calls.append(("Stream", priority))

        if priority_range is not None:
            Stream.priority_range = staticmethod(lambda: priority_range)  # type: ignore[attr-defined]

        @contextmanager
        def stream(s: Any) -> Iterator[None]:
            fake.calls.append(("enter", s))
            try:
                yield
            finally:
                fake.calls.append(("exit", s))

        self.module.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
            is_available=lambda: available,
            Stream=Stream,
            set_stream=lambda s: fake.calls.append(("set_stream", s)),
            stream=stream,
        )


@pytest.fixture
def torch_factory(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kwargs: Any) -> FakeTorch:
        fake = FakeTorch(**kwargs)
        monkeypatch.setitem(sys.modules, "torch", fake.module)
        return fake

    return install


# --- nice on every thread, from the environment ---


def test_env_nice_applies_to_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    settable(5)
    monkeypatch.setenv(PRIORITY_ENV, "low")
    monkeypatch.setenv(NICE_ENV, "5")
    with parked_threads(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            setting = auto_priority()
        nices = thread_nices()
    assert setting == PrioritySetting(priority="low", nice=5, stream=None, notes=())
    assert len(nices) >= 4 and set(nices.values()) == {5}, nices


@needs_root
def test_env_high_applies_below_zero(monkeypatch: pytest.MonkeyPatch, no_torch: None) -> None:
    monkeypatch.setenv(PRIORITY_ENV, "high")
    monkeypatch.setenv(NICE_ENV, "-5")
    with parked_threads(2):
        setting = auto_priority(stream=False)
        assert set(thread_nices().values()) == {-5}
    assert (setting.priority, setting.nice, setting.stream, setting.notes) == ("high", -5, None, ())


def test_threads_started_meanwhile_get_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    settable(6)
    monkeypatch.setenv(NICE_ENV, "6")
    with parked_threads(2):
        auto_priority()
        with parked_threads(2):  # born after: they inherit it
            assert set(thread_nices().values()) == {6}


def test_unset_env_changes_nothing() -> None:
    before = thread_nices()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setting = auto_priority()
    assert (setting.priority, setting.nice, setting.stream) == ("normal", None, None)
    assert len(setting.notes) == 1 and "not started by gpuschedd" in setting.notes[0]
    assert thread_nices() == before


def test_priority_without_nice_leaves_nice_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRIORITY_ENV, "low")
    before = thread_nices()
    setting = auto_priority()
    assert (setting.priority, setting.nice, setting.stream) == ("low", None, None)
    assert any(NICE_ENV in note for note in setting.notes)
    assert thread_nices() == before


@pytest.mark.parametrize(
    "env",
    [
        {NICE_ENV: "abc"},
        {NICE_ENV: "20"},
        {NICE_ENV: "-21"},
        {NICE_ENV: "5x"},
        {NICE_ENV: ""},
        {PRIORITY_ENV: "urgent"},
        {PRIORITY_ENV: "urgent", NICE_ENV: "nope"},
    ],
)
def test_bad_env_warns_and_counts_as_unset(monkeypatch: pytest.MonkeyPatch, env: Dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = thread_nices()
    with pytest.warns(PriorityWarning, match="treated as unset"):
        setting = auto_priority()
    assert (setting.priority, setting.nice, setting.stream) == ("normal", None, None)
    assert sum("treated as unset" in note for note in setting.notes) == len(env)
    assert any("nothing was changed" in note for note in setting.notes)
    assert thread_nices() == before


def test_bad_priority_with_good_nice_follows_the_nice(monkeypatch: pytest.MonkeyPatch) -> None:
    settable(3)
    monkeypatch.setenv(PRIORITY_ENV, "urgent")
    monkeypatch.setenv(NICE_ENV, "3")
    with pytest.warns(PriorityWarning, match="GPUSCHED_PRIORITY='urgent'"):
        setting = auto_priority()
    assert (setting.priority, setting.nice) == ("low", 3)
    assert own_nice() == 3


def test_disagreeing_env_follows_the_nice(monkeypatch: pytest.MonkeyPatch, no_torch: None) -> None:
    settable(4)
    monkeypatch.setenv(PRIORITY_ENV, "high")
    monkeypatch.setenv(NICE_ENV, "4")
    with pytest.warns(PriorityWarning, match="disagrees"):
        setting = auto_priority()
    assert (setting.priority, setting.nice, setting.stream) == ("low", 4, None)
    assert not any(NO_TORCH in note for note in setting.notes)  # low: streams are left alone


def test_explicit_nice_overrides_env(monkeypatch: pytest.MonkeyPatch) -> None:
    settable(7)
    monkeypatch.setenv(PRIORITY_ENV, "normal")
    monkeypatch.setenv(NICE_ENV, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setting = auto_priority(nice=7)
    assert setting == PrioritySetting(priority="low", nice=7, stream=None, notes=())
    assert own_nice() == 7


@needs_root
def test_explicit_negative_nice_is_high(monkeypatch: pytest.MonkeyPatch, torch_factory: Any) -> None:
    monkeypatch.setenv(NICE_ENV, "5")
    fake = torch_factory()
    setting = auto_priority(nice=-2)
    assert (setting.priority, setting.nice) == ("high", -2)
    assert setting.stream is fake.streams[0] and own_nice() == -2


# --- invalid nice ---

BAD_NICE = [21, -21, "x", "5", True, False, 1.5]


@pytest.mark.parametrize("bad", BAD_NICE)
def test_invalid_nice_raises_and_changes_nothing(bad: Any) -> None:
    before = thread_nices()
    with pytest.raises(InvalidArgument, match="nice must be an int from -20 to 19"):
        auto_priority(nice=bad)
    with pytest.raises(InvalidArgument):
        priority(bad)  # at the call, before any with
    with pytest.raises(InvalidArgument):
        inject_priority(bad)
    assert thread_nices() == before


def test_inject_priority_without_parentheses_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="parentheses"):

        @inject_priority  # type: ignore[arg-type]
        def work() -> None:
            pass


def test_inject_priority_refuses_coroutine_functions() -> None:
    async def work() -> None:
        pass

    with pytest.raises(InvalidArgument, match="coroutine"):
        inject_priority(3)(work)


# --- the context manager and the decorator restore ---


@needs_root
def test_context_manager_restores_every_thread() -> None:
    set_all(0)
    release = threading.Event()
    with parked_threads(3):
        with priority(-5, stream=False) as setting:
            inside = thread_nices()
            born = threading.Thread(target=release.wait)  # born inside: keeps what it inherited
            born.start()
        outside = thread_nices()
        release.set()
        born.join()
    assert (setting.priority, setting.nice, setting.stream, setting.notes) == ("high", -5, None, ())
    assert len(inside) >= 4 and set(inside.values()) == {-5}, inside
    assert outside.pop(str(born.native_id)) == -5
    assert set(outside.values()) == {0}, outside


@needs_root
def test_refused_thread_rolls_back_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    set_all(0)
    real = os.setpriority
    calls: List[int] = []

    def refuse_second(which: int, who: int, nice: int) -> None:
        calls.append(who)
        if len(calls) == 2:
            raise PermissionError(13, "refused")
        real(which, who, nice)

    with parked_threads(3):
        before = thread_nices()
        monkeypatch.setattr(os, "setpriority", refuse_second)
        with pytest.warns(PriorityWarning, match="not permitted"):
            setting = auto_priority(nice=-7, stream=False)
        monkeypatch.setattr(os, "setpriority", real)
        assert thread_nices() == before
    assert setting.nice is None and len(setting.notes) == 1
    assert len(calls) == 3 and calls[2] == calls[0]  # the first thread, set back


def test_context_manager_follows_env_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    start = own_nice()
    monkeypatch.setenv(NICE_ENV, str(start + 3))
    with parked_threads(2):
        with priority(stream=False) as setting:
            assert setting.nice == start + 3
            assert set(thread_nices().values()) == {start + 3}
        if ROOT:
            assert set(thread_nices().values()) == {start}


@needs_root
def test_context_manager_restores_after_an_exception() -> None:
    with pytest.raises(KeyError):
        with priority(-3, stream=False):
            assert own_nice() == -3
            raise KeyError("boom")
    assert own_nice() == 0


@needs_root
def test_context_managers_nest() -> None:
    with priority(-3, stream=False):
        with priority(-8, stream=False):
            assert own_nice() == -8
        assert own_nice() == -3
    assert own_nice() == 0


@needs_root
def test_context_manager_is_single_use() -> None:
    context = priority(-1, stream=False)
    with context:
        pass
    with pytest.raises(Conflict, match="entered only once"):
        with context:
            pass


@needs_root
def test_warnings_as_errors_undo_the_context(no_torch: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorityWarning)
        with pytest.raises(PriorityWarning, match=NO_TORCH):
            with priority(-5):
                pytest.fail("the block must not run")
    assert own_nice() == 0


@needs_root
def test_decorator_passes_through_and_restores() -> None:
    @inject_priority(-5, stream=False)
    def work(a: int, b: int = 1) -> Tuple[int, int, int]:
        """Does work."""
        return a, b, own_nice()

    assert own_nice() == 0
    assert work(1, b=2) == (1, 2, -5)
    assert own_nice() == 0
    assert work.__name__ == "work" and work.__doc__ == "Does work."
    assert work.__wrapped__(3) == (3, 1, 0)  # type: ignore[attr-defined]


@needs_root
def test_decorator_on_methods_and_exceptions() -> None:
    class Model:
        def __init__(self) -> None:
            self.seen: List[int] = []

        @inject_priority(-4, stream=False)
        def step(self, x: int) -> int:
            """One step."""
            self.seen.append(own_nice())
            if x < 0:
                raise ValueError("negative")
            return x * 2

    model = Model()
    assert model.step(21) == 42
    with pytest.raises(ValueError):
        model.step(-1)
    assert model.seen == [-4, -4] and own_nice() == 0
    assert Model.step.__qualname__.endswith("Model.step") and Model.step.__doc__ == "One step."


# --- not permitted: as nobody ---

NOBODY_SCRIPT = r"""
import json, os, resource, threading, warnings
from gpusched.priority import PriorityWarning, auto_priority, priority

def nices():
    out = []
    for name in sorted(os.listdir("/proc/self/task")):
        with open(f"/proc/self/task/{name}/stat") as f:
            out.append(int(f.read().rsplit(")", 1)[1].split()[16]))
    return out

ready, release = threading.Event(), threading.Event()
def raised():
    os.setpriority(os.PRIO_PROCESS, 0, 10)  # this thread only: raising is always permitted
    ready.set()
    release.wait()
threads = [threading.Thread(target=raised), threading.Thread(target=release.wait)]
for t in threads:
    t.start()
ready.wait()
before = nices()
results = []
for nice in (-5, 5):  # -5: no thread may go there; 5: the main thread may, the raised one may not
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = auto_priority(nice=nice, stream=False)
    results.append({"nice": s.nice, "priority": s.priority, "notes": list(s.notes),
                    "warnings": [(w.category.__name__, str(w.message)) for w in caught], "after": nices()})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with priority(-5, stream=False) as s:
        inside = nices()
results.append({"nice": s.nice, "inside": inside, "after": nices(), "warnings": len(caught)})
release.set()
for t in threads:
    t.join()
print(json.dumps({"before": before, "results": results, "rlimit": resource.getrlimit(resource.RLIMIT_NICE)[0],
                  "uid": os.getuid()}))
"""


@pytest.mark.skipif(not ROOT, reason="running a process as nobody needs root")
def test_not_permitted_warns_and_leaves_every_thread(no_torch: None) -> None:
    run = subprocess.run(
        [sys.executable, "-c", NOBODY_SCRIPT],
        user="nobody", group="nogroup", extra_groups=[], capture_output=True, text=True, timeout=60,
        cwd="/", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SDK_DIR},
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    if report["rlimit"] > 0:
        pytest.skip(f"RLIMIT_NICE is {report['rlimit']}: nobody may lower its nice")
    assert report["uid"] != 0
    assert sorted(report["before"]) == [0, 0, 10]
    for result in report["results"][:2]:
        assert (result["nice"], result["after"]) == (None, report["before"]), result
        assert result["warnings"] == [["PriorityWarning", result["notes"][0]]], result
        assert "not permitted" in result["notes"][0] and len(result["notes"]) == 1
    assert report["results"][0]["priority"] == "high" and report["results"][1]["priority"] == "low"
    last = report["results"][2]
    assert (last["nice"], last["inside"], last["after"], last["warnings"]) == (
        None, report["before"], report["before"], 1,
    )


# --- CUDA streams ---


def test_no_torch_warns_and_nice_still_applies(monkeypatch: pytest.MonkeyPatch, no_torch: None) -> None:
    monkeypatch.setenv(PRIORITY_ENV, "high")  # no GPUSCHED_NICE: works without root
    with pytest.warns(PriorityWarning, match=NO_TORCH):
        setting = auto_priority()
    assert (setting.priority, setting.nice, setting.stream) == ("high", None, None)
    assert any("torch is not importable" in note for note in setting.notes)
    if ROOT:
        with pytest.warns(PriorityWarning, match=NO_TORCH):
            setting = auto_priority(nice=-5)
        assert (setting.priority, setting.nice, setting.stream) == ("high", -5, None)
        assert [n for n in setting.notes if NO_TORCH in n] == list(setting.notes) and own_nice() == -5
        with pytest.warns(PriorityWarning, match=NO_TORCH):
            with priority(-6) as inside:
                assert (inside.nice, own_nice()) == (-6, -6)
        assert own_nice() == -5


def test_stream_false_leaves_torch_alone(monkeypatch: pytest.MonkeyPatch, no_torch: None) -> None:
    monkeypatch.setenv(PRIORITY_ENV, "high")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setting = auto_priority(stream=False)
    assert setting.stream is None and not any(NO_TORCH in note for note in setting.notes)


def test_fake_torch_high_sets_a_high_priority_stream(monkeypatch: pytest.MonkeyPatch, torch_factory: Any) -> None:
    fake = torch_factory()
    monkeypatch.setenv(PRIORITY_ENV, "high")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setting = auto_priority()
    assert setting.stream is fake.streams[0]
    assert fake.calls == [("Stream", -3), ("set_stream", setting.stream)]  # greatest of priority_range()
    assert setting.priority == "high" and any(NICE_ENV in note for note in setting.notes)


def test_fake_torch_context_enters_and_leaves_the_stream(
    monkeypatch: pytest.MonkeyPatch, torch_factory: Any
) -> None:
    fake = torch_factory(priority_range=None)  # an older torch: -1 means high
    monkeypatch.setenv(PRIORITY_ENV, "high")

    @inject_priority()
    def work() -> List[Tuple[str, Any]]:
        return list(fake.calls)

    with priority() as setting:
        assert fake.calls == [("Stream", -1), ("enter", setting.stream)]
    assert fake.calls[-1] == ("exit", setting.stream)
    fake.calls.clear()
    assert work() == [("Stream", -1), ("enter", fake.streams[1])]
    assert fake.calls == [("Stream", -1), ("enter", fake.streams[1]), ("exit", fake.streams[1])]
    assert all(call[0] != "set_stream" for call in fake.calls)


@pytest.mark.parametrize("env", [{NICE_ENV: "0"}, {NICE_ENV: "5"}, {PRIORITY_ENV: "normal"}, {PRIORITY_ENV: "low"}, {}])
def test_fake_torch_normal_and_low_leave_streams_alone(
    monkeypatch: pytest.MonkeyPatch, torch_factory: Any, env: Dict[str, str]
) -> None:
    settable(int(env.get(NICE_ENV, "19")))
    fake = torch_factory()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert auto_priority().stream is None
    with priority() as setting:
        assert setting.stream is None
    assert fake.calls == []


def test_fake_torch_without_cuda_warns(monkeypatch: pytest.MonkeyPatch, torch_factory: Any) -> None:
    fake = torch_factory(available=False)
    monkeypatch.setenv(PRIORITY_ENV, "high")
    with pytest.warns(PriorityWarning, match="CUDA is not available"):
        setting = auto_priority()
    assert setting.stream is None and fake.calls == []
    assert any(NO_TORCH in note for note in setting.notes)


def test_torch_is_imported_only_when_needed(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('imported torch')\n")
    script = (
        "import os, sys, warnings\n"
        "from gpusched.priority import auto_priority\n"
        "os.environ['GPUSCHED_PRIORITY'] = 'low'\n"
        "auto_priority()\n"
        "print('before high:', 'torch' in sys.modules)\n"
        "os.environ['GPUSCHED_PRIORITY'] = 'high'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    print(auto_priority().notes)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{SDK_DIR}"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "before high: False"
    assert "torch is not importable" in run.stdout.splitlines()[1]


# --- end to end: a real gpuschedd hands its process GPUSCHED_PRIORITY and GPUSCHED_NICE ---

E2E_SCRIPT = r"""
import os, threading
# Undo the nice the daemon set, so that auto_priority has every thread to set again.
os.setpriority(os.PRIO_PROCESS, 0, 0)
release = threading.Event()
threads = [threading.Thread(target=release.wait) for _ in range(3)]
for t in threads:
    t.start()
from gpusched.priority import auto_priority
setting = auto_priority()
nices = []
for name in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{name}/stat") as f:
        nices.append(f.read().rsplit(")", 1)[1].split()[16])
print("priority", setting.priority, "nice", setting.nice)
print("threads", len(nices), *sorted(set(nices)))
for note in setting.notes:
    print("note", note)
release.set()
for t in threads:
    t.join()
"""


def test_end_to_end_under_gpuschedd(sched: GpuSched, tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()  # torch absent, even where it is installed
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch in this test')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{SDK_DIR}"}
    sched.run("prio", ["/usr/bin/python3", "-c", E2E_SCRIPT], nice=-5, env=env, dir="/")
    done = sched.wait("prio")
    logs = sched.logs("prio")
    assert done.exit is not None and done.exit.code == 0, logs
    assert "priority high nice -5" in logs
    assert "threads 4 -5" in logs  # four threads, all at -5
    assert any(line.startswith("note ") and NO_TORCH in line for line in logs), logs
