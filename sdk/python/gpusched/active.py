"""Activation: the RL hand-off as one daemon call.

``with sched.active("reward"):`` makes "reward" resident on its GPUs: the daemon
thaws it when it is frozen or hibernated, and when it does not fit, freezes the
owner's other running processes on those GPUs until it does (least recently
active first), never more than it must. While the block runs the daemon holds
"reward": no activation, from any client, freezes it to make room. Leaving the
block ends the hold and changes nothing else, so the next activation that needs
the room freezes it then. See the daemon's ``activate`` in docs/protocol.md.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from .errors import InvalidArgument
from .types import Activation

__all__ = ["Activation", "activate_params"]


def activate_params(
    name: str, evict: Optional[Sequence[str]], timeout: Optional[float], hold: bool
) -> Dict[str, Any]:
    """The ``activate`` params, or InvalidArgument for arguments of the wrong kind."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"activate: name must be a process name, got {name!r:.100}")
    params: Dict[str, Any] = {"name": name}
    if evict is not None:
        if isinstance(evict, (str, bytes)) or not all(isinstance(n, str) for n in evict):
            raise InvalidArgument(f"activate {name!r}: evict must be a list of process names, got {evict!r:.100}")
        params["evict"] = list(evict)
    if timeout is not None:
        params["timeout"] = timeout
    if hold:
        params["hold"] = True
    return params
