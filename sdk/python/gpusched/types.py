"""Result types: small dataclasses mirroring the wire types of ``pkg/api``.

Each is built with ``from_dict``, which ignores fields it does not know (a newer
daemon may send more), fills absent ones with defaults and keeps the whole wire
object in ``raw``. Times become timezone-aware datetimes (microsecond precision);
a time the daemon leaves out (e.g. ``exited_at`` of a running process) is None.
Durations (a policy's ``ttl``, a job's ``timeout``) become seconds, as floats.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Protocol,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from .errors import Conflict, InvalidArgument

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
    "CheckpointResult",
    "SwapResult",
    "Activation",
    "Policy",
    "HibernateResult",
    "ForkResult",
    "Snapshot",
    "Attempt",
    "Job",
    "LeaseGPU",
    "Lease",
    "Filler",
    "JOB_STATES",
    "JOB_FINAL_STATES",
    "parse_time",
    "parse_duration",
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


# A Go duration string: "1h30m0s", "1.5s", "500ms", "0s".
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """A wire duration as seconds: a number of seconds, or a Go duration string
    ("1h30m0s", "1.5s", "500ms"). Raises ValueError for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or value == "":
        raise ValueError(f"not a duration: {value!r}")
    text, sign = value, 1.0
    if text[0] in "+-":
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    seconds, pos = 0.0, 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            raise ValueError(f"not a duration: {value!r}")
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"not a duration: {value!r}")
    return sign * seconds


def _each(convert: Callable[[Any], _T]) -> Callable[[Any], List[_T]]:
    return lambda items: [convert(item) for item in items]


def _build(cls: Type[_T], data: Mapping[str, Any], **convert: Callable[[Any], Any]) -> _T:
    """``cls`` from a wire object whose keys are its field names.

    Unknown keys are ignored, absent or null ones keep the field's default,
    lists and dicts are copied, ``convert`` maps a field's wire value, and the
    whole object is kept in ``raw``.
    """
    kwargs: Dict[str, Any] = {"raw": dict(data)}
    for f in fields(cls):
        value = data.get(f.name)
        if f.name == "raw" or value is None:
            continue
        if f.name in convert:
            value = convert[f.name](value)
        elif isinstance(value, (list, dict)):
            value = type(value)(value)
        kwargs[f.name] = value
    return cls(**kwargs)


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
        return _build(cls, data)


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
        return _build(cls, data)


@dataclass(frozen=True)
class ProcessGPU:
    """One GPU visible to a managed process, the memory its whole tree uses there and, where
    the GPU tells processes apart, how busy the tree kept it (``util_percent``, else None)."""

    index: int = 0
    uuid: str = ""
    used_mib: int = 0
    util_percent: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessGPU:
        return _build(cls, data)


@dataclass(frozen=True)
class Policy:
    """How the disk tier treats a process.

    Under RAM pressure frozen processes are hibernated lowest ``priority`` first,
    then least recently frozen; a ``pin``-ned one never is. ``ttl``: seconds
    frozen after which it is hibernated; ``idle``: seconds its GPUs may stay idle
    before it is frozen; 0 is off.
    """

    priority: int = 0
    pin: bool = False
    ttl: float = 0.0
    idle: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        return _build(cls, data, ttl=parse_duration, idle=parse_duration)


@dataclass(frozen=True)
class Process:
    """One managed process tree.

    ``state`` is "starting", "running", "freezing", "frozen", "thawing", "locked"
    (CUDA locked or partly checkpointed: retry the freeze or thaw), "failed" (the
    checkpoint driver reports a failure), "hibernating", "hibernated" (on disk
    only, in ``snapshot``), "restoring" (coming back from disk) or "exited".
    ``tier`` says where a live process's GPU memory is: "gpu", "host" when a
    freeze parked ``host_mib`` MiB of it in host RAM (since ``frozen_at``), or
    "disk" when hibernated with ``disk_mib`` MiB of it in its snapshot; "" for
    an exited process (or an older daemon).
    ``error`` says why the last freeze, thaw or hibernate failed; ``note`` what a
    policy last did to it by itself (an eviction, a TTL, an idle freeze). ``policy`` is its
    disk-tier :class:`Policy`; ``snapshot`` the snapshot it lives in when
    hibernated, else the parent its next hibernate builds on ("" for none).
    ``job`` is the id of the queued :class:`Job` it is an attempt of ("" for a
    process started with ``run``); ``preempted_by`` the id of the job it was
    frozen to make room for (it is thawed back once its memory fits again).
    ``filled`` is the ratio its attached :class:`Filler` holds its GPU at
    (``run(..., filled=...)``; 0.0 without one). ``mps_threads`` and
    ``mps_mem_limit_mib`` are its MPS limits (0: not an MPS client, or no cap).
    ``cpus`` are the CPUs (a list such as "2-5,8") it keeps of the process that
    asked for it, its affinity, where narrower than the daemon's users' CPUs
    ("": all of those).
    ``cmd_truncated`` says ``cmd`` is cut to :data:`LIST_CMD_BYTES` as encoded,
    as listings (``processes``, ``remove``), events and the other replies that
    carry a process (``run``, ``kill``, ...) cut it; ``status(name)`` and
    ``wait`` return it whole.
    """

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
    cpus: str = ""
    gpus: List[ProcessGPU] = field(default_factory=list)
    vram_mib: int = 0
    tier: str = ""
    host_mib: int = 0
    disk_mib: int = 0
    log: str = ""
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    exited_at: Optional[datetime] = None
    frozen_at: Optional[datetime] = None
    exit: Optional[Exit] = None
    error: str = ""
    note: str = ""
    policy: Policy = field(default_factory=Policy)
    snapshot: str = ""
    job: str = ""
    preempted_by: str = ""
    filled: float = 0.0
    mps_threads: int = 0
    mps_mem_limit_mib: int = 0
    cmd_truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Process:
        return _build(
            cls,
            data,
            gpus=_each(ProcessGPU.from_dict),
            created_at=parse_time,
            started_at=parse_time,
            exited_at=parse_time,
            frozen_at=parse_time,
            exit=Exit.from_dict,
            policy=Policy.from_dict,
        )


@dataclass(frozen=True)
class GPUProcess:
    """A process holding memory on a GPU; ``managed`` is its managed name, "" if external;
    ``util_percent`` how busy it kept the GPU since the last sample, None where the GPU cannot
    tell processes apart."""

    pid: int = 0
    used_mib: int = 0
    util_percent: Optional[int] = None
    managed: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPUProcess:
        return _build(cls, data)


@dataclass(frozen=True)
class GPU:
    """One device as the daemon last sampled it: memory, and utilization, power
    draw and limit and temperature when known (None otherwise). ``driver`` is the
    driver version, ``checkpoint`` the checkpoint driver ("api", "cli", "sim" or
    "none"). ``healthy`` says whether it passes the daemon's health thresholds;
    ``unhealthy`` says why not, one sentence each. ``filler``: its memory
    :class:`Filler` (anyone's), None when it has none; ``leases``: the ids of the
    leases holding it; ``frozen_mib``: memory of processes frozen off it, parked in
    host RAM. ``error``: why its data cannot be trusted (missing from the driver's
    list, its queries failing, or GPU sampling failing as a whole); "" when fresh.
    ``driver_warning``: a known problem of the NVIDIA driver version, "" when none."""

    index: int = 0
    uuid: str = ""
    name: str = ""
    total_mib: int = 0
    used_mib: int = 0
    free_mib: int = 0
    util_percent: Optional[int] = None
    power_watts: Optional[float] = None
    processes: List[GPUProcess] = field(default_factory=list)
    power_limit_watts: Optional[float] = None
    temp_c: Optional[int] = None
    driver: str = ""
    checkpoint: str = ""
    healthy: bool = True
    unhealthy: List[str] = field(default_factory=list)
    filler: Optional[Filler] = None
    leases: List[str] = field(default_factory=list)
    frozen_mib: int = 0
    error: str = ""
    driver_warning: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPU:
        return _build(cls, data, processes=_each(GPUProcess.from_dict), filler=Filler.from_dict)


@dataclass(frozen=True)
class GPUSummary:
    """A GPU's memory at a glance, as ``status`` reports it; ``error`` as :class:`GPU`'s."""

    index: int = 0
    uuid: str = ""
    total_mib: int = 0
    used_mib: int = 0
    free_mib: int = 0
    error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GPUSummary:
        return _build(cls, data)


@dataclass(frozen=True)
class Hello:
    """The daemon's self-description and who it thinks the caller is; ``criu`` is
    the CRIU version behind the disk tier ("" when it is off); ``driver_warning``
    a known problem of the NVIDIA driver behind freeze and thaw ("" when none);
    ``excluded_gpus`` says, one sentence each, which GPUs the daemon leaves alone and why (a GPU
    in MIG mode)."""

    protocol: int = 0
    version: str = ""
    backend: str = ""
    capabilities: List[str] = field(default_factory=list)
    criu: str = ""
    caller: Identity = field(default_factory=Identity)
    driver_warning: str = ""
    excluded_gpus: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hello:
        return _build(cls, data, caller=Identity.from_dict)


@dataclass(frozen=True)
class Status:
    """The daemon overview; ``processes`` and ``states`` count what the caller may see.

    ``host_mib``: GPU memory parked in host RAM by freezes (all processes);
    ``ram_budget_mib``: the daemon's ``--ram-budget`` (0: unlimited); ``driver``: its
    checkpoint driver ("api", "cli", "sim" or "none"; "" from an older daemon);
    ``disk_bytes``: snapshot images on disk (all processes); ``disk_budget``: its
    ``--disk-budget`` in bytes (0: unlimited); ``disk_free``: bytes free on the snapshot
    directory's filesystem (0 with the disk tier off), ``disk_keep_free``: what of them
    ``--disk-keep-free`` keeps from dumps (0: none); ``criu``: the CRIU version behind the
    disk tier ("" when it is off); for a non-root caller, ``caller_host_mib`` and
    ``ram_share_mib``: the GPU memory their own processes park in host RAM and the most they
    may beside other users' frozen processes (``--user-ram-fraction`` of the budget; 0: no
    cap), and ``caller_disk_bytes`` and
    ``disk_share``: what their snapshots take and the most they may (``--user-disk-fraction``,
    bytes); ``jobs``: the jobs the caller may see, by state
    (finished ones included); ``leases``: the leases the caller may see that are held;
    ``fillers``: every GPU's memory :class:`Filler` (anyone's), by GPU index;
    ``gpu_error``: the error of the last GPU sample when it failed (GPUs then show the
    last good sample, and the queue places nothing), "" otherwise.
    """

    version: str = ""
    protocol: int = 0
    backend: str = ""
    started_at: Optional[datetime] = None
    uptime_seconds: float = 0.0
    processes: int = 0
    states: Dict[str, int] = field(default_factory=dict)
    gpus: List[GPUSummary] = field(default_factory=list)
    host_mib: int = 0
    ram_budget_mib: int = 0
    driver: str = ""
    disk_bytes: int = 0
    disk_budget: int = 0
    disk_free: int = 0
    disk_keep_free: int = 0
    criu: str = ""
    caller_host_mib: int = 0
    ram_share_mib: int = 0
    caller_disk_bytes: int = 0
    disk_share: int = 0
    jobs: Dict[str, int] = field(default_factory=dict)
    leases: int = 0
    fillers: List[Filler] = field(default_factory=list)
    gpu_error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        return _build(
            cls, data, started_at=parse_time, gpus=_each(GPUSummary.from_dict), fillers=_each(Filler.from_dict)
        )


@dataclass(frozen=True)
class Event:
    """One streamed item. ``type`` is "subscribed", "process", "removed", "log",
    "job", "lease" or "filler".

    A "process" or "removed" event carries ``process`` and its ``state``; a "job"
    event the :class:`Job` in ``job``, its state in ``job_state`` and the one
    before in ``prev_state``, and ``warning`` when it only reports the job going
    past its declared VRAM (its state did not change); a "lease" event the
    :class:`Lease` in ``lease`` (``name`` is its id), granted, or released when
    ``lease.released_at`` is set. Leases in events cannot be released through
    the event: use :meth:`GpuSched.release` with their id. A "filler" event
    carries the :class:`Filler` in ``filler`` (``name`` is its GPU's UUID) when one
    starts, changes target or is released (then with ``held_mib`` 0); every
    subscriber gets them. A "job_removed" event carries the finished :class:`Job`
    removed. On "removed" and "job_removed", ``reason`` is "retention" when the
    daemon removed the record by itself (``--keep-finished``,
    ``--keep-finished-for``), "" when a caller did. An "activated" event, sent
    only on the connection of a held activation, carries its :class:`Activation`.
    """

    type: str = ""
    seq: int = 0
    time: Optional[datetime] = None
    name: str = ""
    state: str = ""
    prev_state: str = ""
    process: Optional[Process] = None
    line: str = ""
    job: Optional[Job] = None
    job_state: str = ""
    warning: str = ""
    lease: Optional[Lease] = None
    filler: Optional[Filler] = None
    reason: str = ""
    activation: Optional[Activation] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        return _build(
            cls,
            data,
            time=parse_time,
            process=Process.from_dict,
            job=Job.from_dict,
            lease=Lease.from_dict,
            filler=Filler.from_dict,
            activation=Activation.from_dict,
        )


@dataclass(frozen=True)
class RmFailure:
    """A name rm left as it was: why (``error``, a sentence) and the wire ``code``
    (``not_found``, ``permission_denied``, ``conflict``, ...)."""

    name: str = ""
    error: str = ""
    code: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RmFailure:
        return _build(cls, data)


@dataclass(frozen=True)
class RmResult:
    """What an rm of several names, or of every exited process, did: ``removed``
    the processes forgotten (each entirely), ``failed`` the names left as they
    were, each with why, in the order asked."""

    removed: List[Process] = field(default_factory=list)
    failed: List[RmFailure] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RmResult:
        return _build(cls, data, removed=_each(Process.from_dict), failed=_each(RmFailure.from_dict))


@dataclass(frozen=True)
class CheckpointResult:
    """What a freeze, thaw or migrate did.

    ``op`` is "freeze", "thaw" or "migrate"; ``state`` the process's state after it;
    ``driver`` the checkpoint driver ("api", "cli" or "sim"); ``pids`` the CUDA
    processes of the tree it acted on (empty for a tree without any: it was only
    stopped or continued); ``bytes`` the GPU memory moved; ``gpus`` the UUIDs the
    process is on (thaw, migrate) or was on (freeze); ``ms`` milliseconds per phase
    (freeze: lock, checkpoint, stop; thaw: admit, continue, restore, unlock;
    migrate: also freeze_*; a thaw from disk: also criu_restore; always "total").
    ``snapshot`` is set when a thaw restored the process from that snapshot on disk.
    """

    name: str = ""
    op: str = ""
    state: str = ""
    driver: str = ""
    pids: List[int] = field(default_factory=list)
    bytes: int = 0
    gpus: List[str] = field(default_factory=list)
    ms: Dict[str, float] = field(default_factory=dict)
    snapshot: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def mib(self) -> int:
        """``bytes`` in MiB."""
        return self.bytes >> 20

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointResult:
        return _build(cls, data)


@dataclass(frozen=True)
class Activation:
    """What an activation did (:meth:`GpuSched.activate`, :meth:`GpuSched.active`).

    ``was`` is the process's state before it ("running": nothing was done);
    ``thaw`` the thaw that brought it back (None when it was running; its
    ``snapshot`` is set when it came from disk); ``frozen`` the processes frozen
    to make room, in order; ``held`` whether the daemon holds it for an ``active``
    block. ``ms`` holds the daemon's milliseconds per step: "thaw" (every thaw
    attempt, failed ones included), "freeze" (or "swap" when one process made room
    in a single swap), "rollback" (thawing back what was frozen for an activation
    that failed) and "total". Each step's own phases are in ``thaw.ms`` and each
    ``frozen[i].ms``.
    """

    name: str = ""
    was: str = ""
    thaw: Optional[CheckpointResult] = None
    frozen: List[CheckpointResult] = field(default_factory=list)
    ms: Dict[str, float] = field(default_factory=dict)
    held: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Activation:
        return _build(
            cls, data, thaw=CheckpointResult.from_dict, frozen=lambda v: [CheckpointResult.from_dict(r) for r in v]
        )


@dataclass(frozen=True)
class SwapResult:
    """Both halves of a swap. ``concurrent``: the thaw ran beside the freeze (both fit
    at once) rather than after it; ``ms["total"]``: the whole swap's milliseconds."""

    freeze: CheckpointResult = field(default_factory=CheckpointResult)
    thaw: CheckpointResult = field(default_factory=CheckpointResult)
    concurrent: bool = False
    ms: Dict[str, float] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwapResult:
        return _build(cls, data, freeze=CheckpointResult.from_dict, thaw=CheckpointResult.from_dict)


@dataclass(frozen=True)
class HibernateResult:
    """What a hibernate did.

    ``snapshot``: the snapshot written; ``parent``: the one it is incremental on
    ("" for a full image); ``bytes``: this snapshot's own files on disk;
    ``written``: bytes this dump wrote; ``pages``: memory pages in the image, of
    which ``reused`` were left in the parent; ``gpu_bytes``: GPU memory inside the
    image (checkpointed into host memory first); ``ms``: milliseconds per phase
    (freeze, dump, sync, "total").
    """

    name: str = ""
    state: str = ""
    snapshot: str = ""
    parent: str = ""
    bytes: int = 0
    written: int = 0
    pages: int = 0
    reused: int = 0
    gpu_bytes: int = 0
    ms: Dict[str, float] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HibernateResult:
        return _build(cls, data)


@dataclass(frozen=True)
class ForkResult:
    """What a fork did: ``copies`` are the new processes (NAME-1 .. NAME-N),
    running; ``bytes`` the image's size; ``ms`` milliseconds for the dump, each
    copy (by name) and "total"."""

    name: str = ""
    copies: List[Process] = field(default_factory=list)
    bytes: int = 0
    ms: Dict[str, float] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ForkResult:
        return _build(cls, data, copies=_each(Process.from_dict))


@dataclass(frozen=True)
class Snapshot:
    """One image on disk: of process ``name`` (record ``process_id``), owned by
    ``user``; incremental on ``parent`` ("" for a full one); ``holds``: a
    hibernated process lives in it (or in a child of it); ``bytes``: its own files
    on disk; ``written``: what its dump wrote; ``gpus``, ``vram_mib``: the GPUs
    and GPU memory of the process when dumped."""

    id: str = ""
    name: str = ""
    process_id: str = ""
    user: str = ""
    uid: int = 0
    parent: str = ""
    holds: bool = False
    bytes: int = 0
    written: int = 0
    gpus: List[str] = field(default_factory=list)
    vram_mib: int = 0
    created_at: Optional[datetime] = None
    last_used_at: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        return _build(cls, data, created_at=parse_time, last_used_at=parse_time)


JOB_STATES = ("queued", "starting", "running", "preempted", "done", "failed", "timed_out", "cancelled", "infeasible")
"""Every job state, in the order of a job's life."""

JOB_FINAL_STATES = frozenset({"done", "failed", "timed_out", "cancelled", "infeasible"})
"""The states a job never leaves."""

LIST_CMD_BYTES = 4096
"""What a listing keeps of each command: its JSON array takes at most this many bytes,
cut to its first arguments and a prefix of the next (``cmd_truncated``)."""


def _vram(value: Any) -> Union[int, str]:
    """A declared VRAM as the daemon writes it: MiB (a number) or "auto"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a VRAM declaration: {value!r}")
    return int(value) if isinstance(value, float) else value


@dataclass(frozen=True)
class Attempt:
    """One run of a job.

    ``n`` counts from 1; ``gpus``: the UUIDs it ran on; ``vram_mib``: the
    declaration per GPU it ran with; ``exit``: how its process ended (None while
    it runs); ``peak_mib``: the most it was seen using, by GPU UUID; ``oom``: its
    log ended with an out-of-memory error; ``preempted``: times it was frozen to
    make room for higher-priority work, ``preempted_for``: seconds spent so (not
    counted against the job's timeout); ``outcome``: "done", "failed", "oom"
    (retried with a raised declaration), "timed_out", "cancelled" or "lost" (""
    while it runs).
    """

    n: int = 0
    gpus: List[str] = field(default_factory=list)
    vram_mib: int = 0
    started_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    exit: Optional[Exit] = None
    peak_mib: Dict[str, int] = field(default_factory=dict)
    oom: bool = False
    preempted: int = 0
    preempted_for: float = 0.0
    outcome: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        return _build(
            cls, data, started_at=parse_time, ended_at=parse_time, exit=Exit.from_dict, preempted_for=parse_duration
        )


@dataclass(frozen=True)
class Job:
    """One queued job with its attempts (``submit``, ``jobs``, ``job``).

    ``state`` is one of :data:`JOB_STATES`: "queued", "starting", "running",
    "preempted" (frozen to make room for a higher priority; thawed back when
    memory returns), then "done" (exit 0), "failed", "timed_out", "cancelled" or
    "infeasible" (it can never fit on this machine). ``reason`` says why it
    waits, or why it ended as it did. ``vram`` is the declaration as submitted
    (MiB, "auto", or None for undeclared: whole idle GPUs); ``vram_mib`` the
    current one per GPU ("auto" resolved, raised after an out-of-memory retry;
    0: undeclared). ``gpus`` is a count; ``timeout`` seconds per attempt (0:
    none); ``retries``/``retries_left``: out-of-memory retries. ``started_at``
    and ``exit`` are of the current or last attempt; ``peak_mib`` is the most
    seen per GPU UUID over all attempts; ``verdict`` compares the declaration
    with what it used, once finished; ``process`` names its managed process
    (the job's name), once it had an attempt. ``nice`` is its attempts' CPU nice;
    ``mps_threads``/``mps_mem_limit_mib`` their MPS limits (0: none); ``cpus``
    the CPUs they keep of the process that submitted it (as a process's).
    ``cmd_truncated`` says ``cmd`` is cut, as listings (``jobs``, ``prune_jobs``) cut
    every command to :data:`LIST_CMD_BYTES` as encoded; ``job(name)`` returns it whole.
    """

    id: str = ""
    name: str = ""
    state: str = ""
    reason: str = ""
    user: str = ""
    uid: int = 0
    cmd: List[str] = field(default_factory=list)
    dir: str = ""
    vram: Union[int, str, None] = None
    vram_mib: int = 0
    gpus: int = 0
    priority: int = 0
    timeout: float = 0.0
    retries: int = 0
    retries_left: int = 0
    preemptible: bool = False
    submitted_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    exit: Optional[Exit] = None
    attempts: List[Attempt] = field(default_factory=list)
    peak_mib: Dict[str, int] = field(default_factory=dict)
    verdict: str = ""
    process: str = ""
    nice: int = 0
    cpus: str = ""
    mps_threads: int = 0
    mps_mem_limit_mib: int = 0
    cmd_truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        """Whether the job is in a final state (:data:`JOB_FINAL_STATES`)."""
        return self.state in JOB_FINAL_STATES

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        return _build(
            cls,
            data,
            vram=_vram,
            timeout=parse_duration,
            submitted_at=parse_time,
            started_at=parse_time,
            ended_at=parse_time,
            exit=Exit.from_dict,
            attempts=_each(Attempt.from_dict),
        )


@dataclass(frozen=True)
class LeaseGPU:
    """One leased GPU: its index as the daemon numbers them (-1 when it no longer
    sees the GPU) and its UUID."""

    index: int = 0
    uuid: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeaseGPU:
        return _build(cls, data)


_CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class _LeaseHolder(Protocol):
    """What the client attaches to a Lease it hands out (see client.py)."""

    held: bool

    def applied(self, env: MutableMapping[str, str], previous: Optional[str], value: str) -> None: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class Lease:
    """GPUs leased to code the daemon does not launch (``acquire``).

    Until the lease ends the daemon places nothing on what it holds: ``mib`` MiB
    on each GPU, or the whole GPUs when ``mib`` is 0. ``cuda_visible_devices`` is
    the value for ``CUDA_VISIBLE_DEVICES`` (the GPUs' UUIDs, which CUDA numbers
    the same whatever its device order); :meth:`apply` sets it. ``expires_at`` is
    when the daemon releases it by itself (a non-root user's lease, after
    ``--user-lease-max-hold``), None when never. ``released_at`` is set only in
    the event of its release.

    A Lease from :meth:`GpuSched.acquire` is held on a connection of its own and
    is a context manager: leaving the ``with`` block releases it, as does
    :meth:`release`, closing the client, or the end of the process.
    """

    id: str = ""
    gpus: List[LeaseGPU] = field(default_factory=list)
    cuda_visible_devices: str = ""
    mib: int = 0
    user: str = ""
    uid: int = 0
    acquired_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    released_at: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # What releases it, set on the instance by the client for the leases it hands
    # out; not a field, so that copies, asdict() and == leave it alone.
    _holder: ClassVar[Optional[_LeaseHolder]] = None

    @property
    def gpu_ids(self) -> List[int]:
        """The leased GPUs' indices, as the daemon numbers them (``nvidia-smi``'s
        order; CUDA's own order may differ, which is why :meth:`apply` uses UUIDs)."""
        return [g.index for g in self.gpus]

    @property
    def uuids(self) -> List[str]:
        """The leased GPUs' UUIDs."""
        return [g.uuid for g in self.gpus]

    @property
    def held(self) -> bool:
        """False once released through this SDK (:meth:`release`, the end of its
        ``with`` block, :meth:`GpuSched.release` or closing the client); always
        False for a lease from an event, which this SDK does not hold."""
        return self._holder is not None and self._holder.held

    def apply(self, environ: Optional[MutableMapping[str, str]] = None) -> str:
        """Sets ``CUDA_VISIBLE_DEVICES`` to the leased GPUs in ``environ`` (default:
        ``os.environ``, for this process and the processes it starts later) and
        returns the value. Call it before CUDA is initialized in this process.

        Releasing the lease puts back the value it replaced, unless it was changed
        since. Raises :class:`~gpusched.errors.Conflict` once released.
        """
        if self._holder is not None and not self._holder.held:
            raise Conflict(f"lease {self.id} was released; acquire another")
        env = os.environ if environ is None else environ
        previous = env.get(_CUDA_VISIBLE_DEVICES)
        env[_CUDA_VISIBLE_DEVICES] = self.cuda_visible_devices
        if self._holder is not None:
            self._holder.applied(env, previous, self.cuda_visible_devices)
        return self.cuda_visible_devices

    def release(self) -> None:
        """Ends the lease; a second call does nothing. For a lease this client
        acquired it never raises: if the daemon cannot be told, closing the
        lease's connection ends it all the same."""
        if self._holder is None:
            raise InvalidArgument(
                f"lease {self.id} came from an event, not from a client: release it with GpuSched.release({self.id!r})"
            )
        self._holder.release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._holder is not None:
            self._holder.release()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lease:
        return _build(cls, data, gpus=_each(LeaseGPU.from_dict), acquired_at=parse_time, expires_at=parse_time, released_at=parse_time)


class _FillerHolder(Protocol):
    """What the client attaches to a Filler it hands out (see client.py)."""

    held: bool

    def release(self) -> None: ...


@dataclass(frozen=True)
class Filler:
    """A GPU memory filler (``fill``, ``fillers``): one helper process holding the
    GPU's TOTAL memory usage (everyone's) within one chunk below ``target_mib``,
    for its owner's own work.

    ``index``, ``uuid``: its GPU; ``user``, ``uid``: its owner; ``ratio``: the target
    as asked (0.0 when asked in MiB); ``held_mib``: what its helper holds now (0 in
    a release); ``reserved_mib``: what it keeps free for its owner's job launches,
    thaws and declared growth; ``chunk_mib``: its allocation size; ``pid``: the
    helper; ``process``: the managed process it is attached to (``run(...,
    filled=...)``; "" otherwise); ``session``: it ends with the connection that made
    it; ``error``: the helper's last failure ("" when none).

    A Filler from :meth:`GpuSched.fill` or :meth:`GpuSched.fillers` is a context
    manager: leaving the ``with`` block releases it, as does :meth:`release`.
    """

    index: int = 0
    uuid: str = ""
    user: str = ""
    uid: int = 0
    ratio: float = 0.0
    target_mib: int = 0
    held_mib: int = 0
    reserved_mib: int = 0
    chunk_mib: int = 0
    pid: int = 0
    process: str = ""
    session: bool = False
    created_at: Optional[datetime] = None
    error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # What releases it, set on the instance by the client; not a field, so that
    # copies, asdict() and == leave it alone.
    _holder: ClassVar[Optional[_FillerHolder]] = None

    @property
    def held(self) -> bool:
        """False once released through this SDK; always False for a filler from an
        event, which this SDK does not hold."""
        return self._holder is not None and self._holder.held

    def release(self) -> None:
        """Releases the filler (``unfill``); a second call does nothing. One released
        elsewhere meanwhile counts as released."""
        if self._holder is None:
            raise InvalidArgument(
                f"the filler on GPU {self.index} came from an event, not from a client: "
                f"release it with GpuSched.unfill({self.index})"
            )
        self._holder.release()

    def __enter__(self) -> Filler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._holder is not None:
            self._holder.release()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Filler:
        return _build(cls, data, ratio=float, created_at=parse_time)


def _restore_environ(applied: List[Tuple[MutableMapping[str, str], Optional[str], str]]) -> None:
    """Undoes :meth:`Lease.apply` calls, newest first, where the value set is
    still there."""
    for env, previous, value in reversed(applied):
        if env.get(_CUDA_VISIBLE_DEVICES) != value:
            continue
        if previous is None:
            del env[_CUDA_VISIBLE_DEVICES]
        else:
            env[_CUDA_VISIBLE_DEVICES] = previous
