"""Activation: the RL hand-off as one call.

``with sched.active("reward"):`` makes "reward" resident on its GPUs: it thaws it
when it is frozen or hibernated, and when it does not fit, freezes the owner's
other running processes on those GPUs until it does (least recently active
first), never more than it must. While the block runs, this client never picks
"reward" to make room for another activation; leaving the block changes nothing
else, so the next activation that needs the room freezes it then.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence

from .errors import Conflict, GpuSchedError, InvalidArgument, ResourceExhausted
from .types import CheckpointResult, Process

if TYPE_CHECKING:
    from .client import GpuSched

__all__ = ["Activation"]

_THAWABLE = ("frozen", "hibernated", "locked", "failed")


@dataclass(frozen=True)
class Activation:
    """What an activation did.

    ``was`` is the process's state before it ("running": nothing was done);
    ``thaw`` the thaw that brought it back (None when it was running); ``frozen``
    the processes frozen to make room, in order. ``ms`` holds client-side wall
    milliseconds per step: "status", "thaw" (every thaw attempt, failed ones
    included), "freeze" (or "swap" when one process made room in a single swap),
    "rollback" (thawing back what was frozen for an activation that failed) and
    "total". The daemon's own per-phase timings are in ``thaw.ms`` and each
    ``frozen[i].ms``.
    """

    name: str
    was: str
    thaw: Optional[CheckpointResult] = None
    frozen: List[CheckpointResult] = field(default_factory=list)
    ms: Dict[str, float] = field(default_factory=dict)


class _Clock:
    """Client-side milliseconds per step."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.ms: Dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - began) * 1e3

    def done(self) -> Dict[str, float]:
        self.ms["total"] = (time.perf_counter() - self.start) * 1e3
        return self.ms


class Activations:
    """One client's activations: which processes are in use inside an ``active``
    block, and the order they were last active in. Activations of one client run
    one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_use: Dict[str, int] = {}
        self._last_active: Dict[str, int] = {}
        self._tick = 0

    def activate(
        self, client: GpuSched, name: str, evict: Optional[Sequence[str]], timeout: Optional[float]
    ) -> Activation:
        with self._lock:
            activation = self._activate(client, name, evict, timeout)
            self._touch(name)
            return activation

    @contextmanager
    def active(
        self, client: GpuSched, name: str, evict: Optional[Sequence[str]], timeout: Optional[float]
    ) -> Iterator[Activation]:
        with self._lock:
            activation = self._activate(client, name, evict, timeout)
            self._in_use[name] = self._in_use.get(name, 0) + 1
        try:
            yield activation
        finally:
            with self._lock:
                self._in_use[name] -= 1
                if not self._in_use[name]:
                    del self._in_use[name]
                self._touch(name)

    def _touch(self, name: str) -> None:
        self._tick += 1
        self._last_active[name] = self._tick

    def _activate(
        self, client: GpuSched, name: str, evict: Optional[Sequence[str]], timeout: Optional[float]
    ) -> Activation:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"active: name must be a process name, got {name!r:.100}")
        if evict is not None and (isinstance(evict, str) or not all(isinstance(n, str) for n in evict)):
            raise InvalidArgument(f"active {name!r}: evict must be a list of process names, got {evict!r:.100}")
        clock = _Clock()
        with clock.step("status"):
            target = client.status(name)
        if target.state == "running":
            return Activation(name, target.state, ms=clock.done())
        if target.state not in _THAWABLE:
            raise Conflict(
                f"active {name!r}: it is {target.state}; only a running, frozen or hibernated process can be made active"
            )
        try:
            with clock.step("thaw"):
                return Activation(name, target.state, thaw=client.thaw(name), ms=clock.done())
        except ResourceExhausted as refused:
            victims = self._victims(client, target, evict)
            if not victims and timeout is None:
                raise _annotated(refused, f"active {name!r}: nothing of its owner's on its GPUs may be frozen to make room")
        if not victims:
            with clock.step("thaw"):
                return Activation(name, target.state, thaw=client.thaw(name, timeout=timeout), ms=clock.done())
        if len(victims) == 1:
            with clock.step("swap"):
                swap = client.swap(victims[0], name, timeout=timeout)
            return Activation(name, target.state, thaw=swap.thaw, frozen=[swap.freeze], ms=clock.done())
        return self._make_room(client, name, target.state, victims, timeout, clock)

    def _make_room(
        self, client: GpuSched, name: str, was: str, victims: List[str], timeout: Optional[float], clock: _Clock
    ) -> Activation:
        """Freezes ``victims`` in order until ``name`` thaws; rolls them back if it never does."""
        frozen: List[CheckpointResult] = []
        try:
            for victim in victims[:-1]:
                with clock.step("freeze"):
                    frozen.append(client.freeze(victim))
                try:
                    with clock.step("thaw"):
                        thawed = client.thaw(name)
                    return Activation(name, was, thaw=thawed, frozen=frozen, ms=clock.done())
                except ResourceExhausted:
                    continue  # not yet: freeze the next one
            with clock.step("freeze"):
                frozen.append(client.freeze(victims[-1]))
            with clock.step("thaw"):
                thawed = client.thaw(name, timeout=timeout)  # the last chance may wait for memory
            return Activation(name, was, thaw=thawed, frozen=frozen, ms=clock.done())
        except GpuSchedError as failed:
            with clock.step("rollback"):
                undone = _thaw_back(client, frozen)
            raise _annotated(failed, f"active {name!r} failed after freezing {', '.join(victims[:len(frozen)]) or 'nothing'}; {undone}")

    def _victims(self, client: GpuSched, target: Process, evict: Optional[Sequence[str]]) -> List[str]:
        """The running processes that may be frozen to make room for ``target``:
        ``evict`` in its order, or else the owner's processes on its GPUs (not job
        attempts or MPS clients), least recently active first. Never one in use."""
        running = {p.name: p for p in client.processes() if p.state == "running" and p.name != target.name}
        if evict is not None:
            names = [n for n in evict if n in running]
        else:
            gpus = {g.uuid for g in target.gpus}
            names = sorted(
                (
                    p.name
                    for p in running.values()
                    if p.uid == target.uid
                    and not p.job
                    and not p.mps_threads
                    and (not gpus or gpus & {g.uuid for g in p.gpus})
                ),
                key=lambda n: (self._last_active.get(n, 0), n),
            )
        return [n for n in names if n not in self._in_use]


def _thaw_back(client: GpuSched, frozen: List[CheckpointResult]) -> str:
    """Thaws back what an activation froze, newest first; says how it went."""
    failed = []
    for result in reversed(frozen):
        try:
            client.thaw(result.name)
        except GpuSchedError as e:
            failed.append(f"{result.name} ({e})")
    if failed:
        return "could not thaw back " + ", ".join(failed)
    return "thawed back what it froze" if frozen else "nothing changed"


def _annotated(error: GpuSchedError, context: str) -> GpuSchedError:
    """The same kind of error with ``context`` in front of its message."""
    annotated = type(error)(f"{context}: {error.message}", error.code)
    annotated.__cause__ = error
    return annotated
