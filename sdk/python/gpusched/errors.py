"""Typed exceptions: one class per wire error ``code``, plus client-side failures.

Every exception the SDK raises is a :class:`GpuSchedError`. Errors answered by the
daemon carry its wire ``code`` (``"not_found"``, ...); errors the client detects
itself (no daemon, broken connection, client-side timeout) have ``code`` None.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "GpuSchedError",
    "BadRequest",
    "UnknownMethod",
    "InvalidArgument",
    "TooLarge",
    "NotFound",
    "Exists",
    "PermissionDenied",
    "Conflict",
    "Timeout",
    "Unavailable",
    "ResourceExhausted",
    "Internal",
    "DaemonNotRunning",
    "ConnectionLost",
    "ProtocolError",
    "error_from_wire",
]


class GpuSchedError(Exception):
    """Base of every SDK error. ``message`` is a sentence; ``code`` the wire code or None."""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


class BadRequest(GpuSchedError):
    """Malformed JSON or envelope (``bad_request``)."""


class UnknownMethod(GpuSchedError):
    """The daemon has no such method (``unknown_method``)."""


class InvalidArgument(GpuSchedError):
    """Params failed validation (``invalid_argument``)."""


class TooLarge(GpuSchedError):
    """The request line was over the daemon's limit (``too_large``)."""


class NotFound(GpuSchedError):
    """No such process or resource (``not_found``)."""


class Exists(GpuSchedError):
    """The name is already in use (``exists``)."""


class PermissionDenied(GpuSchedError):
    """The caller may not act on it (``permission_denied``)."""


class Conflict(GpuSchedError):
    """Wrong state for the operation, e.g. rm of a running process (``conflict``)."""


class Timeout(GpuSchedError):
    """A deadline passed: the daemon's (``timeout``) or the client's own (code None)."""


class Unavailable(GpuSchedError):
    """A feature or device is missing, or the daemon asks to retry (``unavailable``)."""


class ResourceExhausted(GpuSchedError):
    """Does not fit, or over a budget (``resource_exhausted``)."""


class Internal(GpuSchedError):
    """A daemon bug or system failure (``internal``)."""


class DaemonNotRunning(GpuSchedError, ConnectionError):
    """Nothing listens on the socket (it is missing or refuses connections)."""


class ConnectionLost(GpuSchedError, ConnectionError):
    """The connection broke after a request was sent: it may or may not have run."""


class ProtocolError(GpuSchedError):
    """The daemon's answer could not be understood, or it speaks another protocol version."""


_BY_CODE: Dict[str, Type[GpuSchedError]] = {
    "bad_request": BadRequest,
    "unknown_method": UnknownMethod,
    "invalid_argument": InvalidArgument,
    "too_large": TooLarge,
    "not_found": NotFound,
    "exists": Exists,
    "permission_denied": PermissionDenied,
    "conflict": Conflict,
    "timeout": Timeout,
    "unavailable": Unavailable,
    "resource_exhausted": ResourceExhausted,
    "internal": Internal,
}


def error_from_wire(code: str, message: str) -> GpuSchedError:
    """The exception for a failed response; an unknown code gives the base class."""
    return _BY_CODE.get(code, GpuSchedError)(message, code)
