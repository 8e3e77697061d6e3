"""Act on the priority gpuschedd gives a process: CPU nice and CUDA stream priority.

The daemon puts ``GPUSCHED_PRIORITY`` (``high``/``normal``/``low``) and ``GPUSCHED_NICE``
into every managed process's environment. :func:`auto_priority` (once, at program
start), :func:`priority` (a ``with`` block) and :func:`inject_priority` (a decorator)
set that nice on every thread of this process and, for ``high``, make a high-priority
CUDA stream current (with PyTorch, imported only then).

There is no cross-process GPU priority without MPS: a CUDA stream's priority orders
work among the streams of *this process only*, never against other processes
(see docs/priority.md, "GPU priority"). Standard library only.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import warnings
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, ContextManager, Dict, List, Optional, Set, Tuple, Type, TypeVar, cast

from .errors import Conflict, InvalidArgument

__all__ = [
    "PriorityWarning",
    "PrioritySetting",
    "auto_priority",
    "priority",
    "inject_priority",
    "PRIORITY_ENV",
    "NICE_ENV",
]

PRIORITY_ENV = "GPUSCHED_PRIORITY"
NICE_ENV = "GPUSCHED_NICE"
NICE_MIN, NICE_MAX = -20, 19
_LEVELS = ("high", "normal", "low")
_TASK_DIR = "/proc/self/task"
_NICE_TEXT = re.compile(r"\s*[+-]?\d{1,3}\s*")
_PASSES = 16  # rounds of listing threads, for threads started while nice is being set

F = TypeVar("F", bound=Callable[..., Any])


class PriorityWarning(RuntimeWarning):
    """Something :mod:`gpusched.priority` was asked to do could not be done (it never raises for that)."""


@dataclass(frozen=True)
class PrioritySetting:
    """What was applied.

    ``priority``: "high", "normal" or "low" (from ``GPUSCHED_PRIORITY``, or from the nice).
    ``nice``: the nice now set on every thread of this process; None if nice was left alone.
    ``stream``: the ``torch.cuda.Stream`` made current, or None.
    ``notes``: one sentence for each thing not done, and why.
    """

    priority: str
    nice: Optional[int]
    stream: Any
    notes: Tuple[str, ...]


def auto_priority(*, nice: Optional[int] = None, stream: bool = True) -> PrioritySetting:
    """Applies this process's gpusched priority; call once, at program start.

    ``nice``: overrides ``GPUSCHED_NICE`` (the class then follows it: below 0 high,
    0 normal, above 0 low). With neither, nothing changes. ``stream``: for "high",
    create a high-priority CUDA stream on the current device and make it current
    (``torch.cuda.set_stream``). What cannot be done gives a :class:`PriorityWarning`
    and a note, never an exception; a bad ``nice`` raises InvalidArgument.
    """
    _check_nice(nice)
    out = _Outcome()
    level, target = _resolve(nice, out)
    applied, _ = _apply_nice(target, out)
    made = None
    if stream and level == "high":
        found = _high_stream(out)
        if found is not None:
            torch, candidate = found
            set_stream = getattr(torch.cuda, "set_stream", None)
            if set_stream is None:
                out.warn("this torch has no torch.cuda.set_stream, so CUDA stream priority not set")
            else:
                try:
                    set_stream(candidate)
                    made = candidate
                except Exception as e:  # a CUDA failure must not end the program
                    out.warn(f"torch.cuda.set_stream failed ({e}), so CUDA stream priority not set")
    out.emit(stacklevel=2)
    return PrioritySetting(level, applied, made, tuple(out.notes))


def priority(nice: Optional[int] = None, *, stream: bool = True) -> ContextManager[PrioritySetting]:
    """A ``with`` block run at a priority; yields the :class:`PrioritySetting`.

    Applies as :func:`auto_priority` (``nice`` defaults to ``GPUSCHED_NICE``), except
    that a high-priority stream is current only inside the block (``torch.cuda.stream``).
    On exit every thread's previous nice comes back (threads started inside keep what
    they inherited) and so does the previous stream. Nice belongs to the whole process:
    blocks may nest, but must not overlap from several threads. A bad ``nice`` raises
    InvalidArgument here, before anything changes.
    """
    _check_nice(nice)
    return _PriorityContext(nice, stream, stacklevel=2)


def inject_priority(nice: Optional[int] = None, *, stream: bool = True) -> Callable[[F], F]:
    """Decorator: each call of the function runs inside ``priority(nice, stream=stream)``.

    Works on functions and methods (not coroutine functions). A bad ``nice`` raises
    InvalidArgument at decoration.
    """
    if callable(nice):
        raise InvalidArgument("inject_priority needs parentheses: @inject_priority() or @inject_priority(-10)")
    _check_nice(nice)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise InvalidArgument(f"inject_priority cannot wrap coroutine function {fn.__qualname__}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _PriorityContext(nice, stream, stacklevel=3):
                return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


class _PriorityContext:
    """The context manager :func:`priority` returns; single use."""

    def __init__(self, nice: Optional[int], stream: bool, stacklevel: int) -> None:
        self._nice = nice
        self._stream = stream
        self._stacklevel = stacklevel
        self._entered = False
        self._previous: Dict[int, int] = {}
        self._stream_context: Any = None

    def __enter__(self) -> PrioritySetting:
        if self._entered:
            raise Conflict("a priority() context can be entered only once; call priority() again")
        self._entered = True
        out = _Outcome()
        level, target = _resolve(self._nice, out)
        applied, self._previous = _apply_nice(target, out)
        made = None
        if self._stream and level == "high":
            found = _high_stream(out)
            if found is not None:
                torch, candidate = found
                try:
                    context = torch.cuda.stream(candidate)
                    context.__enter__()
                    self._stream_context, made = context, candidate
                except Exception as e:
                    out.warn(f"torch.cuda.stream failed ({e}), so CUDA stream priority not set")
        try:
            out.emit(stacklevel=self._stacklevel)
        except BaseException:  # warnings turned into errors: undo before raising
            self._undo(None, None, None)
            raise
        return PrioritySetting(level, applied, made, tuple(out.notes))

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        failed = self._undo(exc_type, exc, tb)
        if failed:
            warnings.warn(
                f"could not restore the previous nice of {failed} thread(s): not permitted",
                PriorityWarning, stacklevel=self._stacklevel,
            )

    def _undo(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> int:
        context, self._stream_context = self._stream_context, None
        previous, self._previous = self._previous, {}
        try:
            if context is not None:
                context.__exit__(exc_type, exc, tb)
        finally:
            failed = _restore(previous)
        return failed


class _Outcome:
    """Notes, and the warnings to give once everything was tried."""

    def __init__(self) -> None:
        self.notes: List[str] = []
        self._warnings: List[str] = []

    def note(self, sentence: str) -> None:
        self.notes.append(sentence)

    def warn(self, sentence: str) -> None:
        self.notes.append(sentence)
        self._warnings.append(sentence)

    def emit(self, stacklevel: int) -> None:
        for sentence in self._warnings:
            warnings.warn(sentence, PriorityWarning, stacklevel=stacklevel + 1)


def _check_nice(nice: object) -> None:
    if nice is None:
        return
    if isinstance(nice, bool) or not isinstance(nice, int) or not NICE_MIN <= nice <= NICE_MAX:
        raise InvalidArgument(f"nice must be an int from {NICE_MIN} to {NICE_MAX} (or None), not {nice!r}")


def _level_of(nice: int) -> str:
    return "high" if nice < 0 else "normal" if nice == 0 else "low"


def _resolve(nice: Optional[int], out: _Outcome) -> Tuple[str, Optional[int]]:
    """The priority class and the nice to set (None: leave nice alone), from ``nice`` or the environment."""
    if nice is not None:
        return _level_of(nice), nice
    raw_nice = os.environ.get(NICE_ENV)
    raw_level = os.environ.get(PRIORITY_ENV)
    env_nice: Optional[int] = None
    if raw_nice is not None:
        if _NICE_TEXT.fullmatch(raw_nice) and NICE_MIN <= int(raw_nice) <= NICE_MAX:
            env_nice = int(raw_nice)
        else:
            out.warn(f"{NICE_ENV}={raw_nice!r} is not a nice from {NICE_MIN} to {NICE_MAX}; treated as unset")
    env_level: Optional[str] = None
    if raw_level is not None:
        if raw_level.strip().lower() in _LEVELS:
            env_level = raw_level.strip().lower()
        else:
            out.warn(f"{PRIORITY_ENV}={raw_level!r} is not high, normal or low; treated as unset")
    if env_nice is not None:
        level = _level_of(env_nice)
        if env_level is not None and env_level != level:
            out.warn(f"{PRIORITY_ENV}={env_level} disagrees with {NICE_ENV}={env_nice}; following the nice ({level})")
        return level, env_nice
    if env_level is not None:
        out.note(f"{NICE_ENV} is not set, so the nice was left alone")
        return env_level, None
    if raw_nice is None and raw_level is None:
        out.note(f"not started by gpuschedd ({PRIORITY_ENV} and {NICE_ENV} are unset), so nothing was changed")
    else:
        out.note(f"no usable {PRIORITY_ENV} or {NICE_ENV}, so nothing was changed")
    return "normal", None


def _thread_ids() -> List[int]:
    """This process's threads, as its own PID namespace numbers them.

    /proc may belong to an outer PID namespace (a process not started by gpuschedd, which
    gives each tree a /proc of its own), so each thread's id is the last one of its NSpid line.
    """
    ids: List[int] = []
    for name in os.listdir(_TASK_DIR):
        try:
            with open(f"{_TASK_DIR}/{name}/status") as status:
                nspid = next((line.split()[1:] for line in status if line.startswith("NSpid:")), None)
        except OSError:  # the thread ended meanwhile
            continue
        ids.append(int(nspid[-1]) if nspid else int(name))
    return ids


def _apply_nice(target: Optional[int], out: _Outcome) -> Tuple[Optional[int], Dict[int, int]]:
    """Sets ``target`` on every thread: (the nice set or None, each changed thread's previous nice)."""
    if target is None:
        return None, {}
    try:
        return target, _set_nice(target)
    except PermissionError:
        out.warn(
            f"not permitted to lower the nice to {target} (needs CAP_SYS_NICE or RLIMIT_NICE), "
            "so the nice was left alone"
        )
    except OSError as e:
        out.warn(f"could not set the nice to {target} ({e}), so the nice was left alone")
    return None, {}


def _set_nice(target: int) -> Dict[int, int]:
    """Sets ``target`` on every thread; on failure restores those already changed and raises.

    Only lowering a nice can be refused (EACCES), so in each round the threads to lower
    come first: when one is refused, those changed before it were lowered too, and
    raising them back is always permitted. Threads that appear meanwhile get a round
    of their own.
    """
    previous: Dict[int, int] = {}
    seen: Set[int] = set()
    try:
        for _ in range(_PASSES):
            fresh: List[Tuple[int, int]] = []
            for tid in _thread_ids():
                if tid in seen:
                    continue
                seen.add(tid)
                try:
                    fresh.append((os.getpriority(os.PRIO_PROCESS, tid), tid))
                except ProcessLookupError:  # the thread ended meanwhile
                    continue
            if not fresh:
                break
            for old, tid in sorted(fresh, reverse=True):  # the highest nice (lowered most) first
                if old == target:
                    continue
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, target)
                except ProcessLookupError:
                    continue
                previous[tid] = old
    except BaseException:
        _restore(previous)
        raise
    return previous


def _restore(previous: Dict[int, int]) -> int:
    """Sets each still-living thread back to its previous nice; the number it was not permitted to."""
    if not previous:
        return 0
    try:
        alive = set(_thread_ids())
    except OSError:
        alive = set(previous)
    failed = 0
    for tid, old in previous.items():
        if tid not in alive:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, old)
        except ProcessLookupError:
            pass
        except PermissionError:
            failed += 1
    return failed


def _high_stream(out: _Outcome) -> Optional[Tuple[Any, Any]]:
    """(torch, a new highest-priority CUDA stream on the current device), or None with a warning."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        out.warn("torch is not importable, so CUDA stream priority not set")
        return None
    try:
        available = bool(torch.cuda.is_available())
    except Exception:
        available = False
    if not available:
        out.warn("CUDA is not available to torch, so CUDA stream priority not set")
        return None
    try:
        return torch, torch.cuda.Stream(priority=_highest_priority(torch.cuda.Stream))
    except Exception as e:
        out.warn(f"could not create a high-priority CUDA stream ({e}), so CUDA stream priority not set")
        return None


def _highest_priority(stream_class: Any) -> int:
    """The most urgent stream priority: lower numbers are more urgent and 0 is the default (and least).

    ``torch.cuda.Stream.priority_range()`` gives (least, greatest): (0, -1) on older
    torch, down to (0, -3) on torch 2.1 and later. Without it (or when it fails), -1:
    torch's long-documented "high", which any torch accepts.
    """
    priority_range = getattr(stream_class, "priority_range", None)
    if priority_range is not None:
        try:
            greatest = min(int(p) for p in priority_range())
        except Exception:
            greatest = 0
        if greatest < 0:
            return greatest
    return -1
