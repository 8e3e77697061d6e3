"""Replays the golden transcripts (pkg/api/testdata/transcripts) over raw sockets,
exactly as internal/daemon/golden_test.go does, against a fresh daemon each, with
its disk tier off (--criu none) as there."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

import pytest

from gpusched.types import parse_time
from harness import GUARD_SECONDS, REPO_ROOT, Daemon

TRANSCRIPTS: List[Path] = sorted((REPO_ROOT / "pkg/api/testdata/transcripts").glob("*.jsonl")) if REPO_ROOT else []


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_time(value: Any) -> bool:
    try:
        return isinstance(value, str) and parse_time(value) is not None
    except ValueError:
        return False


PLACEHOLDERS: Dict[str, Callable[[Any], bool]] = {
    "<any>": lambda value: True,
    "<str>": lambda value: isinstance(value, str),
    "<num>": _is_number,
    "<int>": lambda value: _is_number(value) and float(value).is_integer(),
    "<time>": _is_time,
}


def match(want: Any, got: Any, path: str = "$") -> Optional[str]:
    """Why ``got`` does not match ``want`` (None when it does): objects need the same
    keys; the placeholder strings match any value of their kind."""
    if isinstance(want, str) and want.startswith("<") and want.endswith(">"):
        check = PLACEHOLDERS.get(want)
        if check is None:
            return f"{path}: unknown placeholder {want}"
        return None if check(got) else f"{path}: got {got!r}, want {want}"
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: got {got!r}, want an object"
        if sorted(want) != sorted(got):
            return f"{path}: keys {','.join(sorted(got))}, want {','.join(sorted(want))}"
        for key in want:
            error = match(want[key], got[key], f"{path}.{key}")
            if error:
                return error
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: got {got!r}, want {len(want)} elements"
        for index, (w, g) in enumerate(zip(want, got)):
            error = match(w, g, f"{path}[{index}]")
            if error:
                return error
        return None
    same = want is got if isinstance(want, bool) or isinstance(got, bool) else want == got
    return None if same else f"{path}: got {got!r}, want {want!r}"


def replay(socket_path: str, transcript: Path) -> None:
    conns: Dict[int, Tuple[socket.socket, BinaryIO]] = {}

    def conn(number: int) -> Tuple[socket.socket, BinaryIO]:
        if number not in conns:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(GUARD_SECONDS)
            sock.connect(socket_path)
            conns[number] = (sock, sock.makefile("rb"))
        return conns[number]

    try:
        for number, text in enumerate(transcript.read_text().splitlines(), 1):
            if not text.strip():
                continue
            step = json.loads(text)
            where = f"{transcript.name}:{number}"
            if step.get("close"):
                closing = conns.pop(step.get("conn", 0), None)
                if closing is not None:  # the daemon sees the peer hang up; a later step on it dials anew
                    closing[1].close()
                    closing[0].close()
            elif "send_raw" in step:
                conn(step.get("conn", 0))[0].sendall(step["send_raw"].encode() + b"\n")
            elif "send" in step:
                conn(step.get("conn", 0))[0].sendall(json.dumps(step["send"], separators=(",", ":")).encode() + b"\n")
            elif "recv" in step:
                reader = conn(step.get("conn", 0))[1]
                while True:
                    line = reader.readline()
                    assert line.endswith(b"\n"), f"{where}: the daemon closed the connection (read {line!r})"
                    got = json.loads(line)
                    if "event" in got and step.get("skip_events"):
                        continue
                    mismatch = match(step["recv"], got)
                    assert mismatch is None, f"{where}: {mismatch}\n got: {line.decode()}"
                    break
    finally:
        for sock, reader in conns.values():
            reader.close()
            sock.close()


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda path: path.stem)
def test_transcript(plain_daemon: Daemon, transcript: Path) -> None:
    replay(plain_daemon.socket, transcript)


def test_match_rules() -> None:
    assert match({"a": "<int>", "b": ["<str>", "<num>"], "t": "<time>"}, {"a": 3, "b": ["x", 1.5], "t": "2026-01-02T03:04:05.123456789Z"}) is None
    assert match({"a": 1}, {"a": 1, "extra": 2}) is not None  # strict key sets
    assert match("<int>", 1.5) is not None
    assert match("<num>", True) is not None
    assert match(True, 1) is not None
    assert match("<time>", "yesterday") is not None
    assert match("<nope>", 1) == "$: unknown placeholder <nope>"
