"""Result types: small dataclasses mirroring the wire types of ``pkg/api``.

Each is built with ``from_dict``, which ignores fields it does not know (a newer
daemon may send more), fills absent ones with defaults and keeps the whole wire
object in ``raw``. Times become timezone-aware datetimes (microsecond precision);
a time the daemon leaves out (e.g. ``exited_at`` of a running process) is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar

__all__ = [
    "Exit",
    "Identity",
    "ProcessGPU",
    "Process",
    "GPUProcess",
    "GPU",
    "GPUSummary",
    "Hello",
    "Status",
    "Event",
    "parse_time",
]

_T = TypeVar("_T")

# RFC 3339 as Go writes it: up to nanoseconds, "Z" or a numeric offset.
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 time (as Go writes it) as an aware datetime; None for None or "".

    Raises ValueError for anything else.
    """
    if value is None or value == "":
        return None
    match = _TIME.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    seconds, fraction, zone = match.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    return datetime.fromisoformat(f"{seconds}.{micros}{'+00:00' if zone == 'Z' else zone}")


def _list(data: Mapping[str, Any], key: str, convert: Callable[[Any], _T]) -> List[_T]:
    return [convert(item) for item in data.get(key) or []]


@dataclass(frozen=True)
class Exit:
    """How a process ended: exactly one of ``code``, ``signal`` or ``unknown`` is set."""

    code: Optional[int] = None
    signal: str = ""
    unknown: bool = False
    reason: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Exit:
        return cls(
            code=data.get("code"),
            signal=data.get("signal", ""),
            unknown=data.get("unknown", False),
            reason=data.get("reason", ""),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Identity:
    """A caller or owner, as the daemon read it from SO_PEERCRED."""

    uid: int = 0
    gid: int = 0
    groups: List[int] = field(default_factory=list)
    user: str = ""
    pid: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Identity:
        return cls(
            uid=data.get("uid", 0),
            gid=data.get("gid", 0),
            groups=list(data.get("groups") or []),
            user=data.get("user", ""),
            pid=data.get("pid", 0),
            raw=dict(data),
        )


@dataclass(frozen=True)
class ProcessGPU:
    """One GPU visible to a managed process and the memory its whole tree uses there."""

    index: int = 0
    uuid: str = ""
    used_mib: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessGPU:
        return cls(
            index=data.get("index", 0),
            uuid=data.get("uuid", ""),
            used_mib=data.get("used_mib", 0),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Process:
    """One managed process tree. ``state`` is "starting", "running" or "exited" (more later)."""

    name: str = ""
    id: str = ""
    state: str = ""
    pid: int = 0
    init_pid: int = 0
    uid: int = 0
    gid: int = 0
    user: str = ""
    cmd: List[str] = field(default_factory=list)
    dir: str = ""
    nice: int = 0
    gpus: List[ProcessGPU] = field(default_factory=list)
    vram_mib: int = 0
    log: str = ""
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    exited_at: Optional[datetime] = None
    exit: Optional[Exit] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Process:
        exit_ = data.get("exit")
        return cls(
            name=data.get("name", ""),
            id=data.get("id", ""),
            state=data.get("state", ""),
            pid=data.get("pid", 0),
            init_pid=data.get("init_pid", 0),
            uid=data.get("uid", 0),
            gid=data.get("gid", 0),
            user=data.get("user", ""),
            cmd=list(data.get("cmd") or []),
            dir=data.get("dir", ""),
            nice=data.get("nice", 0),
            gpus=_list(data, "gpus", ProcessGPU.from_dict),
            vram_mib=data.get("vram_mib", 0),
            log=data.get("log", ""),
            created_at=parse_time(data.get("created_at")),
            started_at=parse_time(data.get("started_at")),
            exited_at=parse_time(data.get("exited_at")),
            exit=Exit.from_dict(exit_) if exit_ is not None else None,
            raw=dict(data),
        )


@dataclass(frozen=True)
class GPUProcess:
    """A process holding memory on a GPU; ``managed`` is its managed name, "" if external."""

    pid: int = 0
    used_mib: int = 0
    managed: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPUProcess:
        return cls(
            pid=data.get("pid", 0),
            used_mib=data.get("used_mib", 0),
            managed=data.get("managed", ""),
            raw=dict(data),
        )


@dataclass(frozen=True)
class GPU:
    """One device as the daemon last sampled it; utilization and power when known."""

    index: int = 0
    uuid: str = ""
    name: str = ""
    total_mib: int = 0
    used_mib: int = 0
    free_mib: int = 0
    util_percent: Optional[int] = None
    power_watts: Optional[float] = None
    processes: List[GPUProcess] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPU:
        return cls(
            index=data.get("index", 0),
            uuid=data.get("uuid", ""),
            name=data.get("name", ""),
            total_mib=data.get("total_mib", 0),
            used_mib=data.get("used_mib", 0),
            free_mib=data.get("free_mib", 0),
            util_percent=data.get("util_percent"),
            power_watts=data.get("power_watts"),
            processes=_list(data, "processes", GPUProcess.from_dict),
            raw=dict(data),
        )


@dataclass(frozen=True)
class GPUSummary:
    """A GPU's memory at a glance, as ``status`` reports it."""

    index: int = 0
    uuid: str = ""
    total_mib: int = 0
    used_mib: int = 0
    free_mib: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPUSummary:
        return cls(
            index=data.get("index", 0),
            uuid=data.get("uuid", ""),
            total_mib=data.get("total_mib", 0),
            used_mib=data.get("used_mib", 0),
            free_mib=data.get("free_mib", 0),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Hello:
    """The daemon's self-description and who it thinks the caller is."""

    protocol: int = 0
    version: str = ""
    backend: str = ""
    capabilities: List[str] = field(default_factory=list)
    caller: Identity = field(default_factory=Identity)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hello:
        return cls(
            protocol=data.get("protocol", 0),
            version=data.get("version", ""),
            backend=data.get("backend", ""),
            capabilities=list(data.get("capabilities") or []),
            caller=Identity.from_dict(data.get("caller") or {}),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Status:
    """The daemon overview; ``processes`` and ``states`` count what the caller may see."""

    version: str = ""
    protocol: int = 0
    backend: str = ""
    started_at: Optional[datetime] = None
    uptime_seconds: float = 0.0
    processes: int = 0
    states: Dict[str, int] = field(default_factory=dict)
    gpus: List[GPUSummary] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        return cls(
            version=data.get("version", ""),
            protocol=data.get("protocol", 0),
            backend=data.get("backend", ""),
            started_at=parse_time(data.get("started_at")),
            uptime_seconds=data.get("uptime_seconds", 0.0),
            processes=data.get("processes", 0),
            states=dict(data.get("states") or {}),
            gpus=_list(data, "gpus", GPUSummary.from_dict),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Event:
    """One streamed item. ``type`` is "subscribed", "process", "removed" or "log"."""

    type: str = ""
    seq: int = 0
    time: Optional[datetime] = None
    name: str = ""
    state: str = ""
    prev_state: str = ""
    process: Optional[Process] = None
    line: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        process = data.get("process")
        return cls(
            type=data.get("type", ""),
            seq=data.get("seq", 0),
            time=parse_time(data.get("time")),
            name=data.get("name", ""),
            state=data.get("state", ""),
            prev_state=data.get("prev_state", ""),
            process=Process.from_dict(process) if process is not None else None,
            line=data.get("line", ""),
            raw=dict(data),
        )
