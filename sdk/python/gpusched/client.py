"""The client: JSON lines over the daemon's Unix socket.

One persistent connection serves the plain calls, one at a time (a lock makes a
:class:`GpuSched` safe to share between threads). Every streaming call (events,
log follow, wait, job_wait) gets a connection of its own, so the main one stays
usable. So does every GPU lease: the daemon holds a lease as long as the
connection that acquired it stays open, and the lease's own connection is closed
only by its release, by closing the client, or by the end of the process, never
by a failure or reconnect of the main connection. A session memory filler
(``fill(..., session=True)``) is held on a connection of its own the same way.
Each new connection first says ``hello`` and checks the daemon's protocol version.
"""

from __future__ import annotations

import json
import os
import socket as _socket
import threading
import weakref
from contextlib import contextmanager
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Generic,
    Iterator,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from .active import Activation, activate_params
from .errors import (
    ConnectionLost,
    DaemonNotRunning,
    GpuSchedError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProtocolError,
    Timeout,
    error_from_wire,
)
from .types import (
    GPU,
    CheckpointResult,
    Event,
    Filler,
    ForkResult,
    Hello,
    HibernateResult,
    Job,
    Lease,
    Process,
    RmResult,
    Snapshot,
    Status,
    SwapResult,
    _restore_environ,
    parse_duration,
)

__all__ = ["GpuSched", "Stream", "PROTOCOL_VERSION", "DEFAULT_SOCKET", "SOCKET_ENV", "socket_path", "Duration", "Size"]

PROTOCOL_VERSION = 1
"""The wire protocol this SDK speaks; a daemon that speaks another is refused (ProtocolError)."""

DEFAULT_SOCKET = "/run/gpusched/gpusched.sock"
SOCKET_ENV = "GPUSCHED_SOCKET"

GPURef = Union[int, str]
"""A GPU by index (0) or by UUID ("GPU-...")."""

Duration = Union[int, float, str]
"""Seconds (``90``, ``0.5``), or a Go duration string (``"10m"``, ``"1h30m"``)."""

Size = Union[int, str]
"""MiB (``512``), or a size string (``"18G"``, ``"512MiB"``)."""

_CANCEL_WAIT = 30.0
"""Seconds a cancel may take beyond the client timeout: the daemon ends a running
job's tree (SIGTERM, SIGKILL after its --job-kill-grace, 10 s by default) before
it answers."""

_RELEASE_TIMEOUT = 30.0
"""Seconds a lease's or session filler's release may take once its client is gone (closing its
connection ends it anyway)."""

_JOB_SPEC_FIELDS = (
    "cmd", "name", "vram", "gpus", "priority", "timeout", "retries", "preemptible", "dir", "env", "user",
    "nice", "mps_threads", "mps_mem_limit",
)

T = TypeVar("T")


def socket_path(explicit: Optional[str] = None) -> str:
    """The socket to use: ``explicit``, else ``$GPUSCHED_SOCKET``, else the default."""
    return explicit or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def _encode_params(method: str, params: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The params as JSON text, checked before anything is sent."""
    if params is None:
        return None
    try:
        return json.dumps(params, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{method}: params cannot be sent as JSON: {e}") from None


def _strings(values: Sequence[str]) -> List[str]:
    """A list of strings from a sequence of them; one string is one item, not its letters."""
    return [values] if isinstance(values, str) else [str(v) for v in values]


def _decode(convert: Callable[[Any], T], data: Any, method: str) -> T:
    """Builds a result type, turning a malformed answer into ProtocolError."""
    try:
        return convert(data)
    except (TypeError, ValueError, AttributeError, KeyError) as e:
        raise ProtocolError(f"{method}: unexpected answer from gpuschedd ({e}): {data!r:.200}") from None


def _result(reply: Mapping[str, Any], method: str) -> Dict[str, Any]:
    """The result of a final response line, or its error raised."""
    if reply.get("ok") is True:
        result = reply.get("result")
        return result if isinstance(result, dict) else {}
    if "code" in reply or "error" in reply:
        raise error_from_wire(str(reply.get("code", "")), str(reply.get("error", f"{method} failed")))
    raise ProtocolError(f"{method}: unexpected answer from gpuschedd: {reply!r:.200}")


class _Connection:
    """One socket to the daemon, speaking JSON lines."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self._next_id = 0
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if path == DEFAULT_SOCKET:
                start = "`gpuschedd --sim 1` to try it without a GPU, or `systemctl start gpuschedd`"
            else:
                start = f"`gpuschedd --socket {path} --sim 1` to try it without a GPU"
            raise DaemonNotRunning(
                f"gpusched daemon is not running at {path} (start it with {start}; "
                f"or point socket= or ${SOCKET_ENV} at the socket it serves)"
            ) from None
        except PermissionError as e:
            sock.close()
            raise PermissionDenied(
                f"cannot connect to gpuschedd at {path}: {e.strerror} (the socket is open to root and "
                "to the group given by `gpuschedd --group`)"
            ) from None
        except _socket.timeout:
            sock.close()
            raise Timeout(f"connecting to gpuschedd at {path} took longer than {timeout:g}s") from None
        except OSError as e:
            sock.close()
            raise GpuSchedError(f"cannot connect to gpuschedd at {path}: {e}") from None
        self._sock = sock
        self._reader = sock.makefile("rb")

    def send(self, method: str, params_json: Optional[str], timeout: Optional[float]) -> int:
        """Sends one request and returns its id. OSError means the daemon got none of it."""
        self._next_id += 1
        line = f'{{"id":{self._next_id},"method":{json.dumps(method)}'
        if params_json is not None:
            line += f',"params":{params_json}'
        self._sock.settimeout(timeout)
        self._sock.sendall(line.encode() + b"}\n")
        return self._next_id

    def next_line(self, method: str, request_id: int) -> Dict[str, Any]:
        """The next line answering the request: an event line or the final response."""
        try:
            line = self._reader.readline()
        except _socket.timeout:
            raise Timeout(
                f"no answer from gpuschedd at {self.path} to `{method}` within {self._sock.gettimeout():g}s"
            ) from None
        except (OSError, ValueError) as e:
            raise ConnectionLost(f"connection to gpuschedd at {self.path} failed during `{method}`: {e}") from None
        if not line.endswith(b"\n"):
            raise ConnectionLost(
                f"gpuschedd at {self.path} closed the connection during `{method}` (stopped or restarted?); "
                "the request may or may not have taken effect"
            )
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise ProtocolError(f"{method}: gpuschedd answered with a line that is not a JSON object: {line!r:.200}")
        if message.get("id", request_id) != request_id:
            raise ProtocolError(f"{method}: got the answer to request {message.get('id')!r}, expected {request_id}")
        return message

    def reply(self, method: str, request_id: int) -> Dict[str, Any]:
        """The final response to the request, skipping its events."""
        while True:
            message = self.next_line(method, request_id)
            if "event" not in message:
                return message

    def refusal(self) -> Optional[GpuSchedError]:
        """The error line a daemon wrote before closing this connection unasked (past one of its
        caps), when that close broke a send; None when there is none."""
        try:
            message = json.loads(self._reader.readline())  # the daemon is gone: this does not block
        except (OSError, ValueError):
            return None
        if not isinstance(message, dict) or message.get("ok") is not False or "code" not in message:
            return None
        return error_from_wire(str(message["code"]), str(message.get("error", "")))

    def release_hold(self) -> None:
        """Ends the activation this connection holds and closes it: shuts down the
        writing side, so that the daemon ends the hold and answers a final line,
        and waits for that line, so that no later activation sees the hold."""
        try:
            self._sock.shutdown(_socket.SHUT_WR)
            self._reader.readline()
        except (OSError, ValueError):
            pass  # the daemon is gone: the hold went with it
        self.close()

    def close(self) -> None:
        """Closes the socket; safe to call from another thread while one reads."""
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass  # already disconnected
        self._reader.close()
        self._sock.close()


def _send(conn: _Connection, method: str, params_json: Optional[str], timeout: Optional[float]) -> int:
    """Sends on a new connection, where a failure cannot be retried."""
    try:
        return conn.send(method, params_json, timeout)
    except OSError as e:
        refusal = conn.refusal() if isinstance(e, (BrokenPipeError, ConnectionResetError)) else None
        conn.close()
        if refusal is not None:
            raise refusal from None
        raise ConnectionLost(f"connection to gpuschedd at {conn.path} broke before `{method}` was sent: {e}") from None


def _open(path: str, timeout: Optional[float]) -> _Connection:
    """Connects and checks the daemon's protocol version with hello."""
    conn = _Connection(path, timeout)
    try:
        hello = _result(conn.reply("hello", _send(conn, "hello", None, timeout)), "hello")
    except BaseException:
        conn.close()
        raise
    if hello.get("protocol") != PROTOCOL_VERSION:
        conn.close()
        raise ProtocolError(
            f"gpuschedd at {path} speaks protocol {hello.get('protocol')!r} (version {hello.get('version')!r}); "
            f"this SDK speaks protocol {PROTOCOL_VERSION}: use the gpusched Python package that comes with "
            "the daemon"
        )
    return conn


def _seconds(value: Optional[Duration], what: str) -> Optional[float]:
    """A Duration argument as seconds, for the client's own timeout."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise InvalidArgument(f"{what}: {value!r} is not a duration (seconds, or a string like \"10m\")") from None


def _given(params: Dict[str, Any], **values: Any) -> None:
    """Adds to ``params`` the values that were given (not None)."""
    params.update((key, value) for key, value in values.items() if value is not None)


def _argv(cmd: Any, what: str) -> List[str]:
    """``cmd`` as an argv list, or InvalidArgument: never a string split into characters."""
    if isinstance(cmd, (str, bytes)):
        raise InvalidArgument(
            f"{what}: cmd must be an argv list like [\"python3\", \"train.py\"], not the string {cmd!r} "
            "(for a shell line, use [\"/bin/sh\", \"-c\", line])"
        )
    argv = _sequence(cmd, what, "cmd")
    if not all(isinstance(arg, str) for arg in argv):
        raise InvalidArgument(f"{what}: cmd must be a list of strings, got {argv!r:.200}")
    return argv


def _sequence(value: Any, what: str, field: str) -> List[Any]:
    """A list or tuple argument as a list, or InvalidArgument (a string or a number is not one)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{what}: {field} must be a list, got {value!r:.200}")
    return list(value)


def _environment(env: Any, what: str) -> Dict[str, Any]:
    """An env mapping as a dict, or InvalidArgument."""
    if not isinstance(env, Mapping):
        raise InvalidArgument(f"{what}: env must be a mapping of names to values like dict(os.environ), got {env!r:.200}")
    return dict(env)


def _job_spec(
    cmd: Sequence[str],
    name: Optional[str] = None,
    vram: Optional[Size] = None,
    gpus: int = 1,
    priority: int = 0,
    timeout: Optional[Duration] = None,
    retries: int = 0,
    preemptible: bool = False,
    dir: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    user: Optional[str] = None,
    nice: int = 0,
    mps_threads: Optional[int] = None,
    mps_mem_limit: Optional[Size] = None,
    *,
    what: str = "submit",
) -> Dict[str, Any]:
    """One JobSpec for the wire, with run()'s defaults: dir is os.getcwd(), env is sent only when given."""
    spec: Dict[str, Any] = {"cmd": _argv(cmd, what), "dir": dir if dir is not None else os.getcwd()}
    if name is not None:
        spec["name"] = name
    if env is not None:
        spec["env"] = _environment(env, what)
    if vram is not None:
        spec["vram"] = vram
    if gpus != 1:
        spec["gpus"] = gpus
    if priority:
        spec["priority"] = priority
    if timeout is not None:
        spec["timeout"] = timeout
    if retries:
        spec["retries"] = retries
    if preemptible:
        spec["preemptible"] = True
    if user is not None:
        spec["user"] = user
    if nice:
        spec["nice"] = nice
    _given(spec, mps_threads=mps_threads, mps_mem_limit=mps_mem_limit)
    return spec


class _LeaseHolder:
    """What releases one Lease: for a lease this client acquired, the connection
    that holds it (closing it ends the lease); for one it only listed, a release
    by id on the client's main connection."""

    def __init__(self, client: GpuSched, lease_id: str, conn: Optional[_Connection]) -> None:
        self.lease_id = lease_id
        self.held = True
        self._client = weakref.ref(client)
        self._conn = conn
        self._own = conn is not None
        self._lock = threading.Lock()
        self._applied: List[Tuple[MutableMapping[str, str], Optional[str], str]] = []

    def applied(self, env: MutableMapping[str, str], previous: Optional[str], value: str) -> None:
        with self._lock:
            self._applied.append((env, previous, value))

    def release(self) -> None:
        with self._lock:
            if not self.held:
                return
            client = self._client()
            if not self._own:
                if client is None:
                    raise ConnectionLost(f"lease {self.lease_id}: its client is gone")
                client.call("release", {"id": self.lease_id})  # raises as the daemon answers
            else:
                conn, self._conn = self._conn, None
                if conn is not None:  # else an interrupted release already closed it
                    try:
                        params = _encode_params("release", {"id": self.lease_id})
                        timeout = client.timeout if client is not None else _RELEASE_TIMEOUT
                        _result(conn.reply("release", conn.send("release", params, timeout)), "release")
                    except (GpuSchedError, OSError):
                        pass  # already gone (NotFound), or the daemon cannot answer: closing ends it all the same
                    finally:
                        conn.close()
            self.held = False
            applied, self._applied = self._applied, []
        _restore_environ(applied)
        if client is not None:
            client._forget_lease(self)


class _FillerHolder:
    """What releases one Filler: for a session filler this client made, the
    connection that holds it (an unfill on it, then closing it, which ends the
    filler all the same); for any other, an unfill by GPU on the client's main
    connection."""

    def __init__(self, client: GpuSched, filler: Filler, conn: Optional[_Connection]) -> None:
        self.index = filler.index
        self.uuid = filler.uuid
        self.created_at = filler.created_at  # a new filler on the GPU has a new one
        self.held = True
        self._client = weakref.ref(client)
        self._conn = conn
        self._own = conn is not None
        self._lock = threading.Lock()

    def _detach(self) -> Optional[_Connection]:
        """Marks it released (elsewhere) and hands back its connection to close."""
        with self._lock:
            conn, self._conn, self.held = self._conn, None, False
        return conn

    def matches(self, gpu: GPURef) -> bool:
        """Whether ``gpu`` (an index, a string of digits or a UUID) names this filler's GPU."""
        if isinstance(gpu, int):
            return gpu == self.index
        return gpu == self.uuid or (gpu.isdigit() and int(gpu) == self.index)

    def release(self) -> Optional[Dict[str, Any]]:
        """Unfills; returns the daemon's answer, or None when it was already
        released (here, or elsewhere: NotFound counts as released)."""
        result: Optional[Dict[str, Any]] = None
        with self._lock:
            if not self.held:
                return None
            client = self._client()
            params = {"gpu": self.uuid}
            if not self._own:
                if client is None:
                    raise ConnectionLost(f"filler on GPU {self.index}: its client is gone")
                try:
                    result = client.call("unfill", params)
                except NotFound:
                    pass  # released elsewhere
            else:
                conn, self._conn = self._conn, None
                if conn is not None:  # else an interrupted release already closed it
                    try:
                        timeout = client.timeout if client is not None else _RELEASE_TIMEOUT
                        sent = conn.send("unfill", _encode_params("unfill", params), timeout)
                        result = _result(conn.reply("unfill", sent), "unfill")
                    except (GpuSchedError, OSError):
                        pass  # already gone (NotFound), or no answer: closing ends it all the same
                    finally:
                        conn.close()
            self.held = False
        if client is not None:
            client._forget_filler(self)
        return result


class Stream(Generic[T]):
    """A streaming call on a connection of its own.

    Iterate for its items; once iteration ends, ``result`` holds the call's final
    result (a dict; None before). ``close()``, or leaving a ``with`` block, ends
    it early, also from another thread. An error answer is raised by the
    iteration as the matching GpuSchedError.
    """

    def __init__(
        self, conn: _Connection, method: str, request_id: int, item: Callable[[Dict[str, Any]], Optional[T]]
    ) -> None:
        self.method = method
        self.result: Optional[Dict[str, Any]] = None
        self._conn: Optional[_Connection] = conn
        self._request_id = request_id
        self._item = item
        self._closed = False

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while True:
            conn = self._conn
            if conn is None:
                raise StopIteration
            try:
                message = conn.next_line(self.method, self._request_id)
            except GpuSchedError:
                if self._closed:
                    raise StopIteration from None
                self._release()
                raise
            if "event" in message:
                item = _decode(self._item, message["event"], self.method)
                if item is not None:
                    return item
                continue
            self._release()
            self.result = _result(message, self.method)

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Ends the stream; the daemon stops it when the connection closes."""
        self._closed = True
        self._release()

    def __enter__(self) -> Stream[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class GpuSched:
    """A client of gpuschedd.

    ``socket``: the daemon's socket (default: ``$GPUSCHED_SOCKET``, else
    ``/run/gpusched/gpusched.sock``). ``timeout``: seconds allowed to connect and
    for each plain call to answer (None: no limit); streaming calls wait as long
    as they stream. The connection opens on the first call. When it broke
    (daemon restarted), the next call reconnects once, transparently; a request
    is never sent twice. ``close()`` (or leaving a ``with`` block) closes every
    connection, open streams included; a later call connects again.
    """

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = 30.0) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn: Optional[_Connection] = None
        self._streams: "weakref.WeakSet[Stream[Any]]" = weakref.WeakSet()
        self._streams_lock = threading.Lock()
        self._leases: Dict[str, _LeaseHolder] = {}  # held by this client, by id
        self._fillers: Dict[str, _FillerHolder] = {}  # session fillers held by this client, by GPU UUID

    def __repr__(self) -> str:
        return f"GpuSched(socket={self.socket_path!r})"

    def __enter__(self) -> GpuSched:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Releases every lease and session filler this client holds, then closes the
        main connection (after a call in progress) and every open stream. Persistent
        fillers stay."""
        with self._streams_lock:
            streams = list(self._streams)
            self._streams.clear()
            leases = list(self._leases.values())
            fillers = list(self._fillers.values())
        for holder in leases:
            holder.release()
        for filler_holder in fillers:
            filler_holder.release()
        for stream in streams:
            stream.close()
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _timeout_plus(self, wait: Optional[float]) -> Optional[float]:
        """The client timeout for a call the daemon may spend ``wait`` seconds waiting in."""
        return self.timeout + wait if self.timeout is not None and wait is not None else self.timeout

    # Low level.

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Sends one request on the main connection and returns its result ({} when it has none).

        Events of a streaming method are skipped; use :meth:`stream` to see them.
        """
        return self._call(method, params, self.timeout)

    def _call(self, method: str, params: Optional[Mapping[str, Any]], timeout: Optional[float]) -> Dict[str, Any]:
        params_json = _encode_params(method, params)
        with self._lock:
            try:
                reply = self._exchange(method, params_json, timeout)
            except BaseException:
                self._drop()  # its state is unknown: never reuse it
                raise
        return _result(reply, method)

    def _exchange(self, method: str, params_json: Optional[str], timeout: Optional[float]) -> Dict[str, Any]:
        conn, request_id = self._conn, None
        if conn is not None:
            try:
                request_id = conn.send(method, params_json, timeout)
            except OSError:
                self._drop()  # the daemon closed it (restarted?) and never saw the request: reconnect once
        if conn is None or request_id is None:
            conn = self._conn = _open(self.socket_path, self.timeout)
            request_id = _send(conn, method, params_json, timeout)
        return conn.reply(method, request_id)

    def stream(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Stream[Dict[str, Any]]:
        """Starts a streaming call on a new connection; iterate for its event dicts, then read ``.result``."""
        return self._stream(method, params, lambda event: event)

    def _stream(
        self, method: str, params: Optional[Mapping[str, Any]], item: Callable[[Dict[str, Any]], Optional[T]]
    ) -> Stream[T]:
        params_json = _encode_params(method, params)
        conn = _open(self.socket_path, self.timeout)
        stream = Stream(conn, method, _send(conn, method, params_json, None), item)
        with self._streams_lock:
            self._streams.add(stream)
        return stream

    # Methods.

    def hello(self) -> Hello:
        """The daemon's version, backend, capabilities and the caller's identity."""
        return _decode(Hello.from_dict, self.call("hello"), "hello")

    def run(
        self,
        name: str,
        cmd: Sequence[str],
        gpu: Optional[GPURef] = None,
        gpus: Optional[Sequence[GPURef]] = None,
        dir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        nice: int = 0,
        user: Optional[str] = None,
        priority: int = 0,
        pin: bool = False,
        ttl: Optional[Duration] = None,
        idle: Optional[Duration] = None,
        filled: Optional[float] = None,
        mps_threads: Optional[int] = None,
        mps_mem_limit: Optional[Size] = None,
    ) -> Process:
        """Starts ``cmd`` (an argv, no shell) as a managed process called ``name``.

        ``gpu``/``gpus``: the GPUs it may use, by index or UUID (default: all).
        ``dir``: its working directory (default: ``os.getcwd()``).
        ``env``: its WHOLE environment. None sends nothing: the process starts with an
        EMPTY environment plus the daemon's ``GPUSCHED_*``/``CUDA_*`` variables (a bare
        command name is still looked up in a standard PATH). Pass ``env=dict(os.environ)``
        to hand it yours. ``nice``: -20..19 (below 0 needs root). ``user``: root only,
        run as that user. ``priority``, ``pin``, ``ttl`` and ``idle``: its disk-tier
        policy, as in :meth:`set_policy`. ``filled``: attach a memory filler to its single
        GPU that holds the GPU's total usage at this ratio (0 < filled <= 1) while the
        process frees and re-allocates, released when it exits (see :meth:`fill`); keep
        its allocation steps below the free room that leaves (5% of the GPU at 0.95).
        Raises :class:`~gpusched.errors.Conflict` when the GPU already has a filler.
        ``mps_threads`` (percent of the GPU's threads, 1..100) and ``mps_mem_limit``
        (MiB or a size like ``"4G"``, per GPU) make it an MPS client with those limits;
        an MPS client cannot be frozen, and a daemon without the MPS tools raises
        :class:`~gpusched.errors.Unavailable`.
        """
        params: Dict[str, Any] = {"name": name, "cmd": _argv(cmd, "run"), "dir": dir if dir is not None else os.getcwd()}
        if gpu is not None:
            params["gpu"] = gpu
        if gpus is not None:
            params["gpus"] = _sequence(gpus, "run", "gpus")
        if env is not None:
            params["env"] = _environment(env, "run")
        if nice:
            params["nice"] = nice
        if user is not None:
            params["user"] = user
        if priority:
            params["priority"] = priority
        if pin:
            params["pin"] = True
        if ttl is not None:
            params["ttl"] = ttl
        if idle is not None:
            params["idle"] = idle
        if filled is not None:
            params["filled"] = filled
        _given(params, mps_threads=mps_threads, mps_mem_limit=mps_mem_limit)
        return _decode(Process.from_dict, self.call("run", params), "run")

    def kill(self, name: str, signal: Union[str, int, None] = None, grace: Optional[float] = None) -> Process:
        """Ends a process tree and returns its final state.

        Without ``signal``: SIGTERM to the tree, SIGKILL after ``grace`` seconds (default:
        the daemon's), returning once it exited. With ``signal`` ("KILL", "SIGUSR1", 9 or
        ``signal.SIGKILL``): only that signal, returning at once (the state is the one
        before the signal).
        """
        params: Dict[str, Any] = {"name": name}
        if signal is not None:
            params["signal"] = str(int(signal)) if isinstance(signal, int) else signal
        if grace is not None:
            params["grace"] = grace
        return _decode(Process.from_dict, self._call("kill", params, self._timeout_plus(grace)), "kill")

    @overload
    def status(self, name: None = None) -> Status: ...

    @overload
    def status(self, name: str) -> Process: ...

    def status(self, name: Optional[str] = None) -> Union[Status, Process]:
        """The daemon overview (:class:`Status`), or with ``name`` that :class:`Process`."""
        if name is None:
            return _decode(Status.from_dict, self.call("status"), "status")
        return _decode(Process.from_dict, self.call("status", {"name": name}), "status")

    def processes(self, user: Optional[str] = None, states: Optional[Sequence[str]] = None) -> List[Process]:
        """The processes the caller may see (root: all, or ``user``'s), sorted by name;
        with ``states`` (e.g. ``["exited", "frozen"]``) only those in one of them."""
        params: Dict[str, Any] = {}
        if user:
            params["user"] = user
        if states is not None:
            params["states"] = _strings(states)
        result = self.call("ps", params or None)
        return _decode(lambda r: [Process.from_dict(p) for p in r.get("processes") or []], result, "ps")

    def logs(self, name: str, lines: int = 100) -> List[str]:
        """The last ``lines`` lines of a process's log, oldest first (-1: all retained).

        The daemon returns at most the last 65,536 lines and MiB of a log: lines asked for
        beyond them are left out (the raw result, ``call("logs", ...)``, then says
        ``"truncated": true``).
        """
        result = self.call("logs", {"name": name, "lines": lines})
        return _decode(lambda r: [str(line) for line in r.get("lines") or []], result, "logs")

    def follow_logs(self, name: str, lines: int = 100) -> Stream[str]:
        """The last ``lines`` log lines, then each new one, until the process exits."""
        return self._stream(
            "logs",
            {"name": name, "lines": lines, "follow": True},
            lambda event: str(event.get("line", "")) if event.get("type") == "log" else None,
        )

    def wait(self, name: str, timeout: Optional[float] = None) -> Process:
        """Blocks until the process exits and returns its final state.

        ``timeout``: seconds, after which :class:`~gpusched.errors.Timeout` is raised
        (None, or 0 as on the wire, waits forever).
        """
        params: Dict[str, Any] = {"name": name}
        if timeout is not None:
            params["timeout"] = timeout
        with self._stream("wait", params, Event.from_dict) as stream:
            for _ in stream:
                pass  # the state changes on the way
        if stream.result is None:
            raise ConnectionLost(f"wait {name!r}: the client was closed before the process exited")
        return _decode(Process.from_dict, stream.result, "wait")

    def rm(self, name: str) -> Process:
        """Forgets an exited process (record and logs) and returns its last record."""
        return _decode(Process.from_dict, self.call("rm", {"name": name}), "rm")

    def remove(self, names: Sequence[str] = (), exited: bool = False, user: Optional[str] = None) -> RmResult:
        """Forgets several exited processes by ``names``, or with ``exited`` every
        exited process of the caller (root: of everyone, or of ``user``). Each is
        removed entirely or not at all; the result says which were and, for the
        others, why (it raises only for bad input, such as an invalid name)."""
        params: Dict[str, Any] = {}
        if names or not exited:
            params["names"] = _strings(names)
        if exited:
            params["exited"] = True
        if user is not None:
            params["user"] = user
        return _decode(RmResult.from_dict, self.call("rm", params), "rm")

    def events(self, name: Optional[str] = None) -> Stream[Event]:
        """Every event the caller may see (of ``name`` only, if given), starting with
        one of type "subscribed"; it never ends by itself: close it."""
        return self._stream("events", {"name": name} if name else None, Event.from_dict)

    def gpus(self) -> List[GPU]:
        """The GPUs by index, with their memory and processes."""
        return _decode(lambda r: [GPU.from_dict(g) for g in r.get("gpus") or []], self.call("gpus"), "gpus")

    # The job queue (capability "queue"): jobs declare their GPU memory and start
    # the moment it fits. Each job's attempts run as managed processes named
    # after the job, so status, logs and follow_logs work on them by that name.

    def submit(
        self,
        cmd: Sequence[str],
        name: Optional[str] = None,
        vram: Optional[Size] = None,
        gpus: int = 1,
        priority: int = 0,
        timeout: Optional[Duration] = None,
        retries: int = 0,
        preemptible: bool = False,
        dir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        nice: int = 0,
        mps_threads: Optional[int] = None,
        mps_mem_limit: Optional[Size] = None,
    ) -> Job:
        """Queues ``cmd`` (an argv, no shell) as a job and returns it, "queued".

        ``name``: default "job-<n>"; a name may be reused once its earlier job has
        finished, and names like "j12" are refused (job ids look like that).
        ``vram``: GPU memory per GPU, MiB (``512``) or a size (``"18G"``), or
        ``"auto"`` (the peak of earlier runs of the same command); None: undeclared,
        it gets whole idle GPUs. ``gpus``: how many GPUs. ``priority``: -1000..1000,
        higher first. ``timeout``: per attempt, seconds or a string like ``"2h"``.
        ``retries``: out-of-memory retries, each with a raised declaration.
        ``preemptible``: may be frozen to make room for higher-priority jobs.
        ``dir`` and ``env`` as in :meth:`run`: ``dir`` defaults to ``os.getcwd()``,
        and ``env=None`` sends none (an EMPTY environment plus the daemon's
        ``GPUSCHED_*``/``CUDA_*`` variables). ``user``: root only, run as that user.
        ``nice``, ``mps_threads`` and ``mps_mem_limit`` as in :meth:`run` (the MPS
        memory cap defaults to the declared ``vram``).

        Raises :class:`~gpusched.errors.InvalidArgument` for bad input and
        :class:`~gpusched.errors.Exists` for a name in use by an unfinished job or a
        running process. A job that can never fit is accepted and then ends
        "infeasible" (see :meth:`wait_job`).
        """
        spec = _job_spec(
            cmd, name, vram, gpus, priority, timeout, retries, preemptible, dir, env, user, nice, mps_threads, mps_mem_limit
        )
        jobs = self._submit(spec)
        if len(jobs) != 1:
            raise ProtocolError(f"submit: gpuschedd answered {len(jobs)} jobs for one")
        return jobs[0]

    def submit_many(self, specs: Sequence[Mapping[str, Any]]) -> List[Job]:
        """Queues several jobs at once: all of them, or none when any is invalid
        (:class:`~gpusched.errors.InvalidArgument` says which). Each spec is a dict
        of :meth:`submit`'s arguments (``cmd`` required), with its defaults; the
        jobs come back in order."""
        wire: List[Dict[str, Any]] = []
        for number, spec in enumerate(_sequence(specs, "submit", "specs"), 1):
            if not isinstance(spec, Mapping):
                raise InvalidArgument(f"submit: nothing queued: job {number} is not a dict of submit's arguments: {spec!r:.200}")
            unknown = sorted(set(spec) - set(_JOB_SPEC_FIELDS))
            if unknown or "cmd" not in spec:
                what = f"unknown field {unknown[0]!r}" if unknown else "cmd is missing"
                raise InvalidArgument(f"submit: nothing queued: job {number}: {what}")
            given = {key: value for key, value in spec.items() if value is not None}
            wire.append(_job_spec(**given, what=f"submit: nothing queued: job {number}"))
        if not wire:
            return []
        return self._submit({"jobs": wire})

    def _submit(self, params: Mapping[str, Any]) -> List[Job]:
        result = self.call("submit", params)
        return _decode(lambda r: [Job.from_dict(j) for j in r.get("jobs") or []], result, "submit")

    def jobs(
        self,
        state: Optional[str] = None,
        all: bool = False,
        user: Optional[str] = None,
        states: Optional[Sequence[str]] = None,
        recent: Optional[Duration] = None,
    ) -> List[Job]:
        """The caller's jobs (root: everyone's, or ``user``'s) in submission order:
        unfinished ones (and with ``recent``, those that finished within it), or with
        ``all`` finished ones too, or those in ``state`` or in one of ``states``
        ("finished" stands for every final state)."""
        params: Dict[str, Any] = {}
        if recent is not None:
            params["recent"] = recent
        if state is not None:
            params["state"] = state
        if states is not None:
            params["states"] = _strings(states)
        if all:
            params["all"] = True
        if user is not None:
            params["user"] = user
        result = self.call("jobs", params or None)
        return _decode(lambda r: [Job.from_dict(j) for j in r.get("jobs") or []], result, "jobs")

    def prune_jobs(self, user: Optional[str] = None) -> List[Job]:
        """Removes the caller's finished jobs (root: everyone's, or ``user``'s) and
        returns them; unfinished jobs are left as they are."""
        result = self.call("prune_jobs", {"user": user} if user is not None else None)
        return _decode(lambda r: [Job.from_dict(j) for j in r.get("jobs") or []], result, "prune_jobs")

    def job(self, name: str) -> Job:
        """One job, by name (the newest job of that name) or by id ("j12")."""
        return _decode(Job.from_dict, self.call("job", {"name": name}), "job")

    def cancel(self, name: str) -> Job:
        """Cancels a job and returns it, "cancelled": a queued one at once, a running
        one once its process tree ended (SIGTERM, then SIGKILL after the daemon's
        ``--job-kill-grace``). Raises :class:`~gpusched.errors.Conflict` when it has
        already finished."""
        return _decode(Job.from_dict, self._call("cancel", {"name": name}, self._timeout_plus(_CANCEL_WAIT)), "cancel")

    def wait_job(
        self, name: str, timeout: Optional[Duration] = None, on_event: Optional[Callable[[Event], None]] = None
    ) -> Job:
        """Blocks until the job is finished (done, failed, timed_out, cancelled or
        infeasible) and returns it; a failed job is returned, not raised.

        ``on_event`` is handed each "job" :class:`Event` on the way (state changes,
        and warnings when it goes past its declared VRAM); an exception from it ends
        the wait and propagates. ``timeout``: seconds (or a string like ``"10m"``),
        after which :class:`~gpusched.errors.Timeout` is raised (None, or 0 as on the
        wire, waits forever).
        """
        params: Dict[str, Any] = {"name": name}
        if timeout is not None:
            params["timeout"] = timeout
        with self._stream("job_wait", params, Event.from_dict) as stream:
            for event in stream:
                if on_event is not None:
                    on_event(event)
        if stream.result is None:
            raise ConnectionLost(f"job_wait {name!r}: the client was closed before the job finished")
        return _decode(Job.from_dict, stream.result, "job_wait")

    # GPU leases (capability "leases"), for code the daemon does not launch.

    def acquire(
        self,
        gpus: int = 1,
        min_free: Optional[Size] = None,
        max_util: Optional[int] = None,
        max_power: Optional[float] = None,
        gpu_ids: Optional[Sequence[GPURef]] = None,
        timeout: Optional[Duration] = None,
        priority: int = 0,
        max_temp: Optional[int] = None,
    ) -> Lease:
        """Leases ``gpus`` GPUs and returns the :class:`Lease`, a context manager::

            with sched.acquire(gpus=2, min_free="20G", timeout=600) as lease:
                lease.apply()                 # CUDA_VISIBLE_DEVICES for this process
                train()

        Until it is released the daemon places nothing on what it holds:
        ``min_free`` (MiB, or a size like ``"20G"``) on each GPU, or without it the
        whole GPUs, which must then be idle. Only GPUs at most ``max_util`` percent
        utilized, drawing at most ``max_power`` watts and at most ``max_temp``
        degrees C qualify (besides the daemon's own health thresholds), and only among
        ``gpu_ids`` (indices or UUIDs) when given. ``priority``: -1000..1000, as for
        jobs. ``timeout``: seconds (or a string like ``"10m"``) to wait for GPUs
        that fit; None or 0 answers at once, raising
        :class:`~gpusched.errors.ResourceExhausted` when nothing fits now (also when
        it can never fit), and a wait that runs out raises
        :class:`~gpusched.errors.Timeout`.

        The lease is held on a connection of its own, which this client keeps open:
        it ends with :meth:`Lease.release` (or the ``with`` block), :meth:`release`,
        :meth:`close` (or this client's ``with`` block), or the end of this process,
        however it ends (also once neither the client nor the Lease is referenced
        any more). A failure or reconnect of the main connection does not touch it;
        a daemon restart ends every lease (check with :meth:`leases`).
        """
        params: Dict[str, Any] = {"gpus": gpus}
        if min_free is not None:
            params["min_free"] = min_free
        if max_util is not None:
            params["max_util"] = max_util
        if max_power is not None:
            params["max_power"] = max_power
        if gpu_ids is not None:
            params["gpu_ids"] = _sequence(gpu_ids, "acquire", "gpu_ids")
        if timeout is not None:
            params["timeout"] = timeout
        if priority:
            params["priority"] = priority
        if max_temp is not None:
            params["max_temp"] = max_temp
        params_json = _encode_params("acquire", params)
        wait = _seconds(timeout, "acquire: timeout")
        conn = _open(self.socket_path, self.timeout)
        try:
            reply = conn.reply("acquire", _send(conn, "acquire", params_json, self._timeout_plus(wait)))
            lease = _decode(Lease.from_dict, _result(reply, "acquire"), "acquire")
        except BaseException:
            conn.close()  # a wait still in progress ends with it
            raise
        holder = _LeaseHolder(self, lease.id, conn)
        object.__setattr__(lease, "_holder", holder)
        with self._streams_lock:
            self._leases[lease.id] = holder
        return lease

    def lease(
        self,
        gpus: int = 1,
        min_free: Optional[Size] = None,
        max_util: Optional[int] = None,
        max_power: Optional[float] = None,
        gpu_ids: Optional[Sequence[GPURef]] = None,
        timeout: Optional[Duration] = None,
        priority: int = 0,
        max_temp: Optional[int] = None,
    ) -> Lease:
        """:meth:`acquire`, spelled for ``with``: the GPUs are leased at once and
        released when the block ends::

            with sched.lease(gpus=2, min_free="20G") as lease:
                print(lease.gpu_ids, lease.cuda_visible_devices)
        """
        return self.acquire(gpus, min_free, max_util, max_power, gpu_ids, timeout, priority, max_temp)

    def release(self, lease_or_id: Union[Lease, str]) -> None:
        """Ends a lease, given as a :class:`Lease` or by id.

        A lease this client holds is released on its own connection, which is then
        closed; releasing it twice does nothing. Another lease (of another client
        of the same user; root: anyone's) is released by id, and an id the daemon
        does not hold raises :class:`~gpusched.errors.NotFound`.
        """
        lease_id = lease_or_id.id if isinstance(lease_or_id, Lease) else lease_or_id
        holder = lease_or_id._holder if isinstance(lease_or_id, Lease) else None
        if holder is None:
            with self._streams_lock:
                holder = self._leases.get(lease_id)
        if holder is not None:
            holder.release()
            return
        self.call("release", {"id": lease_id})

    def leases(self) -> List[Lease]:
        """The held leases the caller may see (root: all), by id. Those this client
        holds release as from :meth:`acquire`; others release by id (see :meth:`release`)."""
        leases = _decode(
            lambda r: [Lease.from_dict(x) for x in r.get("leases") or []], self.call("leases"), "leases"
        )
        for lease in leases:
            with self._streams_lock:
                holder = self._leases.get(lease.id)
            object.__setattr__(lease, "_holder", holder or _LeaseHolder(self, lease.id, None))
        return leases

    def _forget_lease(self, holder: _LeaseHolder) -> None:
        with self._streams_lock:
            if self._leases.get(holder.lease_id) is holder:
                del self._leases[holder.lease_id]

    # Memory fillers (capability "fill"): GPU memory reserved for the owner's own work.

    def fill(
        self, gpu: GPURef, ratio: Optional[float] = None, mib: Optional[Size] = None, session: bool = False
    ) -> Filler:
        """Holds GPU ``gpu``'s TOTAL memory usage (everyone's) at ``ratio`` of its memory
        (0 < ratio <= 1) or at ``mib`` (MiB, or a size like ``"20G"``), exactly one of
        them, and returns the :class:`Filler` once its helper holds what it can::

            with sched.fill(1, ratio=0.95, session=True):
                ...                                  # GPU 1 kept for your own jobs

        A helper process holds device memory in chunks, gives back within one tick
        what others take and grows back when memory frees, so that the usage stays
        within one chunk below the target. The memory is reserved for your own
        managed work: your queued jobs and thaws count it as free, and the filler
        hands it over before they start (a job's declaration, or the whole GPU for an
        undeclared one); other users' jobs and thaws see it as used. A GPU has at most
        one filler; filling it again (with the same ``session``) changes your
        filler's target.

        ``session``: hold the filler on a connection of its own, which this client
        keeps open; it ends with :meth:`Filler.release` (or the ``with`` block),
        :meth:`unfill`, :meth:`close`, or the end of this process. Otherwise the
        filler is persistent: it stays, across daemon restarts, until :meth:`unfill`.

        Raises :class:`~gpusched.errors.InvalidArgument` for a bad ratio or size or a
        GPU that does not exist, :class:`~gpusched.errors.Conflict` when another user's
        filler (or one attached to a process, or of the other ``session`` setting) is
        on the GPU.
        """
        params: Dict[str, Any] = {"gpu": gpu}
        if ratio is not None:
            params["ratio"] = ratio
        if mib is not None:
            params["mib"] = mib
        if not session:
            filler = _decode(Filler.from_dict, self.call("fill", params), "fill")
            object.__setattr__(filler, "_holder", _FillerHolder(self, filler, None))
            return filler
        params["session"] = True
        params_json = _encode_params("fill", params)
        conn = _open(self.socket_path, self.timeout)
        try:
            reply = conn.reply("fill", _send(conn, "fill", params_json, self.timeout))
            filler = _decode(Filler.from_dict, _result(reply, "fill"), "fill")
        except BaseException:
            conn.close()  # a filler made meanwhile ends with it
            raise
        stale: Optional[_Connection]
        with self._streams_lock:
            old = self._fillers.get(filler.uuid)
            if old is not None and old.held and old.created_at == filler.created_at:
                holder, stale = old, conn  # a new target for the filler this client holds: it stays on its connection
            else:
                # A new filler (one this client held was released elsewhere): it lives on the new connection.
                holder = self._fillers[filler.uuid] = _FillerHolder(self, filler, conn)
                stale = old._detach() if old is not None else None
        if stale is not None:
            stale.close()
        object.__setattr__(filler, "_holder", holder)
        return filler

    def unfill(self, gpu: GPURef) -> Filler:
        """Releases GPU ``gpu``'s filler (its helper frees its memory and exits) and
        returns it, with ``held_mib`` 0. Only its owner (or root) may:
        :class:`~gpusched.errors.PermissionDenied` otherwise;
        :class:`~gpusched.errors.NotFound` when the GPU has no filler."""
        with self._streams_lock:
            holder = next((h for h in self._fillers.values() if h.matches(gpu)), None)
        if holder is not None:
            result = holder.release()
            if result is not None:
                return _decode(Filler.from_dict, result, "unfill")
        return _decode(Filler.from_dict, self.call("unfill", {"gpu": gpu}), "unfill")

    def fillers(self) -> List[Filler]:
        """Every GPU's filler, whoever owns it, by GPU index. Those this client holds
        release as from :meth:`fill`; others release with an unfill of their GPU."""
        fillers = _decode(
            lambda r: [Filler.from_dict(x) for x in r.get("fillers") or []], self.call("fillers"), "fillers"
        )
        for filler in fillers:
            with self._streams_lock:
                holder = self._fillers.get(filler.uuid)
            object.__setattr__(filler, "_holder", holder or _FillerHolder(self, filler, None))
        return fillers

    def _forget_filler(self, holder: _FillerHolder) -> None:
        with self._streams_lock:
            if self._fillers.get(holder.uuid) is holder:
                del self._fillers[holder.uuid]

    # Checkpointing: GPU memory parked in host RAM and brought back (capability "freeze";
    # migrate: "migrate"). The daemon finishes an operation it began even when the
    # client stops waiting (a client-side Timeout): check ``status(name).state``.

    def freeze(self, name: str, lock_timeout: Optional[float] = None, stop: Optional[bool] = None) -> CheckpointResult:
        """Parks a running process's GPU memory in host RAM, freeing its GPUs.

        Every CUDA process of the tree is locked (waiting up to ``lock_timeout``
        seconds for in-flight work; default: the daemon's ``--lock-timeout``) and
        checkpointed; then the tree is stopped with SIGSTOP unless ``stop=False``
        (default: the daemon's ``--freeze-stop``). Afterwards the process is "frozen",
        tier "host"; a "locked" or "failed" process may be frozen again. Raises
        :class:`~gpusched.errors.Conflict` in another state (already frozen, exited),
        :class:`~gpusched.errors.Timeout` when the lock waited too long,
        :class:`~gpusched.errors.ResourceExhausted` over the daemon's RAM budget,
        :class:`~gpusched.errors.Unavailable` without a checkpoint driver.
        """
        params: Dict[str, Any] = {"name": name}
        if lock_timeout is not None:
            params["lock_timeout"] = lock_timeout
        if stop is not None:
            params["stop"] = stop
        result = self._call("freeze", params, self._timeout_plus(lock_timeout))
        return _decode(CheckpointResult.from_dict, result, "freeze")

    def thaw(self, name: str, timeout: Optional[float] = None) -> CheckpointResult:
        """Brings a frozen process's memory back onto its GPUs and continues it.

        When the GPUs lack room, raises :class:`~gpusched.errors.ResourceExhausted`
        at once, or with ``timeout`` waits up to that many seconds for memory to free
        (then :class:`~gpusched.errors.Timeout`). Raises
        :class:`~gpusched.errors.Conflict` when the process is not frozen (a "locked"
        or "failed" one may be thawed again).
        """
        params: Dict[str, Any] = {"name": name}
        if timeout is not None:
            params["timeout"] = timeout
        result = self._call("thaw", params, self._timeout_plus(timeout))
        return _decode(CheckpointResult.from_dict, result, "thaw")

    def swap(self, off: str, on: str, timeout: Optional[float] = None) -> SwapResult:
        """Freezes ``off`` and thaws ``on``: ``swap("policy", "reward")`` parks policy
        in host RAM and brings reward back onto the GPUs.

        Both run at once when ``on`` fits beside ``off``'s memory (``concurrent``),
        else the freeze goes first; ``timeout`` is then the thaw's wait for memory,
        as in :meth:`thaw`. When the thaw fails, ``off`` is thawed back and the error
        says so. Raises :class:`~gpusched.errors.Conflict` unless ``off`` is running
        and ``on`` frozen.
        """
        params: Dict[str, Any] = {"freeze": off, "thaw": on}
        if timeout is not None:
            params["timeout"] = timeout
        return _decode(SwapResult.from_dict, self._call("swap", params, self._timeout_plus(timeout)), "swap")

    def active(
        self, name: str, evict: Optional[Sequence[str]] = None, timeout: Optional[float] = None
    ) -> ContextManager[Activation]:
        """Makes ``name`` resident on its GPUs for the ``with`` block: the RL hand-off::

            for step in range(steps):
                with sched.active("policy"):
                    rollouts = generate()
                with sched.active("reward"):    # freezes policy only if both do not fit
                    scores = score(rollouts)

        On entry the daemon thaws a frozen or hibernated ``name``. When it does not
        fit, the processes that may make room are frozen until it does: ``evict``
        (names, in that order; ``[]``: none), or by default its owner's running
        processes on its GPUs (not queued jobs' attempts, not MPS clients), least
        recently active first; one alone is swapped out in a single step.
        ``timeout``: seconds the last thaw may wait for memory to free, as in
        :meth:`thaw`. If it still does not fit, what was frozen is thawed back and
        the error is raised (most often :class:`~gpusched.errors.ResourceExhausted`).
        A running ``name`` is left as it is.

        Yields the :class:`~gpusched.Activation` (what was thawed and frozen, with
        the daemon's timings per step). The block holds ``name`` on a connection of
        its own: while it lasts, no activation from any client freezes ``name`` to
        make room; leaving it ends the hold and changes nothing else, so the next
        activation that needs its room freezes it. Activations of one owner's
        processes run one at a time in the daemon.
        """
        params = activate_params(name, evict, timeout, hold=True)
        return self._held(params, _seconds(timeout, "activate: timeout"))

    @contextmanager
    def _held(self, params: Dict[str, Any], wait: Optional[float]) -> Iterator[Activation]:
        """A held activation on a connection of its own, for the ``with`` block."""
        conn = _open(self.socket_path, self.timeout)
        try:
            request_id = _send(conn, "activate", _encode_params("activate", params), self._timeout_plus(wait))
            while True:
                message = conn.next_line("activate", request_id)
                event = message.get("event")
                if event is None:
                    _result(message, "activate")  # raises the daemon's error
                    raise ProtocolError("activate: gpuschedd answered a held activation without holding it")
                if isinstance(event, dict) and event.get("type") == "activated":
                    activation = _decode(Activation.from_dict, event.get("activation") or {}, "activate")
                    break
        except BaseException:
            conn.close()
            raise
        try:
            yield activation
        finally:
            conn.release_hold()

    def activate(
        self, name: str, evict: Optional[Sequence[str]] = None, timeout: Optional[float] = None
    ) -> Activation:
        """:meth:`active` without the block (and without a hold): makes ``name``
        resident and returns the :class:`~gpusched.Activation`."""
        params = activate_params(name, evict, timeout, hold=False)
        result = self._call("activate", params, self._timeout_plus(_seconds(timeout, "activate: timeout")))
        return _decode(Activation.from_dict, result, "activate")

    def migrate(
        self, name: str, gpu: Union[GPURef, Sequence[GPURef]], timeout: Optional[float] = None
    ) -> CheckpointResult:
        """Moves a running or frozen process onto other GPUs; it ends running.

        ``gpu``: the target, by index or UUID, for a process on one GPU; for one on
        several, a list with one target per current GPU, in order. A running process
        is frozen (not stopped) and restored there; if that fails it is thawed back
        where it was. ``timeout``: seconds to wait for room on the targets. Needs a
        checkpoint driver with device maps (else :class:`~gpusched.errors.Unavailable`);
        :class:`~gpusched.errors.Conflict` when it is already on those GPUs.
        """
        params: Dict[str, Any] = {"name": name}
        if isinstance(gpu, (int, str)):
            params["gpu"] = gpu
        else:
            params["gpus"] = _sequence(gpu, "migrate", "gpu (an index, a UUID, or a list of them)")
        if timeout is not None:
            params["timeout"] = timeout
        result = self._call("migrate", params, self._timeout_plus(timeout))
        return _decode(CheckpointResult.from_dict, result, "migrate")

    # The disk tier (capability "hibernate"; fork: "fork"): processes dumped to disk
    # with CRIU. A dump or restore of a large process takes a while: give the client
    # a ``timeout`` to match (the daemon finishes an operation it began anyway).

    def hibernate(self, name: str, full: bool = False, lock_timeout: Optional[float] = None) -> HibernateResult:
        """Moves a running or frozen process to disk: a running one is frozen first
        (``lock_timeout`` as in :meth:`freeze`), then its tree is dumped with CRIU into
        a new snapshot and ended in memory. It is then "hibernated", tier "disk";
        :meth:`thaw` restores it. A repeat hibernate writes only the pages changed
        since its last snapshot (``parent``), unless ``full``.

        Raises :class:`~gpusched.errors.Conflict` when it is not running or frozen,
        :class:`~gpusched.errors.ResourceExhausted` over the daemon's ``--disk-budget``
        or when the disk is full (it then stays frozen in RAM),
        :class:`~gpusched.errors.Unavailable` when the daemon has no CRIU.
        """
        params: Dict[str, Any] = {"name": name}
        if lock_timeout is not None:
            params["lock_timeout"] = lock_timeout
        if full:
            params["full"] = True
        result = self._call("hibernate", params, self._timeout_plus(lock_timeout))
        return _decode(HibernateResult.from_dict, result, "hibernate")

    def fork(
        self, name: str, copies: int, gpus: Optional[Sequence[GPURef]] = None, timeout: Optional[float] = None
    ) -> ForkResult:
        """Dumps a running or frozen process (leaving it as it was) and restores
        ``copies`` independent copies of it from that one image, named ``NAME-1`` ..
        ``NAME-N``, each in its own PID namespace, running.

        ``gpus``: one GPU per copy, for a process on one GPU (default: the source's
        GPUs); ``timeout``: seconds each copy may wait for its GPU memory. Raises
        :class:`~gpusched.errors.InvalidArgument` (copies outside 1..64, wrong number
        of GPUs), :class:`~gpusched.errors.Exists` (a copy's name is taken by a live
        process), :class:`~gpusched.errors.Unavailable` without CRIU.
        """
        params: Dict[str, Any] = {"name": name, "copies": copies}
        if gpus is not None:
            params["gpus"] = _sequence(gpus, "fork", "gpus")
        if timeout is not None:
            params["timeout"] = timeout
        wait = timeout * copies if timeout is not None else None
        return _decode(ForkResult.from_dict, self._call("fork", params, self._timeout_plus(wait)), "fork")

    def snapshots(self, name: Optional[str] = None) -> List[Snapshot]:
        """The snapshots the caller may see (root: all; of process ``name`` only, if
        given), oldest first. Their total size and the budget are in :meth:`status`
        (``disk_bytes``, ``disk_budget``)."""
        result = self.call("snapshots", {"name": name} if name else None)
        return _decode(lambda r: [Snapshot.from_dict(s) for s in r.get("snapshots") or []], result, "snapshots")

    def delete_snapshot(self, id: str) -> Snapshot:
        """Deletes a snapshot and returns it.

        Raises :class:`~gpusched.errors.Conflict` when a hibernated process lives in
        it or another snapshot is incremental on it, :class:`~gpusched.errors.NotFound`,
        :class:`~gpusched.errors.InvalidArgument` for something that is not a snapshot id.
        """
        return _decode(Snapshot.from_dict, self.call("delete_snapshot", {"id": id}), "delete_snapshot")

    def set_policy(
        self,
        name: str,
        priority: Optional[int] = None,
        pin: Optional[bool] = None,
        ttl: Optional[Duration] = None,
        idle: Optional[Duration] = None,
    ) -> Process:
        """Changes a live process's disk-tier policy (``set`` on the wire); arguments
        left None stay as they are. Returns the process.

        Under RAM pressure frozen processes are hibernated lowest ``priority`` first
        (-1000..1000), then least recently frozen; a ``pin``-ned one never is. ``ttl``
        hibernates it once frozen that long, ``idle`` freezes it once its GPUs were
        idle that long; 0 turns either off (seconds, or a string like ``"10m"``).
        A priority above 0 and pinning need root
        (:class:`~gpusched.errors.PermissionDenied`).
        """
        params: Dict[str, Any] = {"name": name}
        if priority is not None:
            params["priority"] = priority
        if pin is not None:
            params["pin"] = pin
        if ttl is not None:
            params["ttl"] = ttl
        if idle is not None:
            params["idle"] = idle
        return _decode(Process.from_dict, self.call("set", params), "set")
