"""A real gpuschedd for the tests: built from this repository, on two simulated GPUs."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from gpusched import GpuSched, Process, Stream


def find_repo_root() -> Optional[Path]:
    """The directory holding go.mod above this file, if the SDK sits in its repository."""
    return next((p for p in Path(__file__).resolve().parents if (p / "go.mod").is_file()), None)


REPO_ROOT = find_repo_root()
GUARD_SECONDS = 30.0  # failure guard only: nothing waits this long when things work


@contextmanager
def guarded(stream: Stream[Any]) -> Iterator[Stream[Any]]:
    """Closes the stream after GUARD_SECONDS, so a missing event fails the test instead of hanging it."""
    timer = threading.Timer(GUARD_SECONDS, stream.close)
    timer.start()
    try:
        with stream:
            yield stream
    finally:
        timer.cancel()


@lru_cache(maxsize=None)
def find_criu() -> Tuple[Optional[str], str]:
    """The CRIU for gpuschedd's disk tier, as ``scripts/install-criu.sh --print-path``
    finds it (installing it when missing, as the Go tests do), or None and why not.

    CRIU needs root, and the script needs the repository."""
    if os.geteuid() != 0:
        return None, "CRIU needs root"
    if REPO_ROOT is None:
        return None, "no go.mod above the SDK, so no scripts/install-criu.sh"
    try:
        run = subprocess.run(
            [str(REPO_ROOT / "scripts" / "install-criu.sh"), "--print-path"],
            capture_output=True, text=True, timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"scripts/install-criu.sh failed: {e}"
    path = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    if run.returncode != 0 or not path:
        return None, f"scripts/install-criu.sh failed (exit {run.returncode}): {run.stderr.strip()[-500:]}"
    return path, ""


def short_dir() -> Path:
    """A fresh directory under /tmp: socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))
    path.chmod(0o755)
    return path


class Daemon:
    """One gpuschedd on its own socket, state, log and simulated-GPU directories.

    ``criu`` is its ``--criu``: a CRIU path for the disk tier, "none" to turn the tier
    off, None for the daemon's default; ``args`` are more flags.
    ``start()`` returns once the daemon said READY=1 on its NOTIFY_SOCKET;
    ``stop()`` ends it with SIGTERM (managed processes keep running, by design);
    ``close()`` also kills every process tree it left and removes the directory.
    """

    def __init__(self, bin_dir: Path, criu: Optional[str] = None, args: Sequence[str] = ()) -> None:
        self.dir = short_dir()
        self.socket = str(self.dir / "gs.sock")
        self.criu = criu
        self._args = ([] if criu is None else ["--criu", criu]) + list(args)
        self._daemon = bin_dir / "gpuschedd"
        self._stderr = self.dir / "gpuschedd.stderr"
        self._proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        notify_path = self.dir / "notify.sock"
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        try:
            with open(self._stderr, "ab") as stderr:
                self._proc = subprocess.Popen(
                    [
                        str(self._daemon), "--sim", "2", "--socket", self.socket,
                        "--state-dir", str(self.dir / "state"), "--log-dir", str(self.dir / "logs"),
                        "--sim-dir", str(self.dir / "sim"), "--log-format", "console",
                    ] + self._args,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NOTIFY_SOCKET": str(notify_path)},
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                )
            self._wait_ready(notify)
        finally:
            notify.close()
            notify_path.unlink()

    def _wait_ready(self, notify: socket.socket) -> None:
        assert self._proc is not None
        exited = os.pidfd_open(self._proc.pid)
        deadline = time.monotonic() + GUARD_SECONDS
        try:
            while True:
                remaining = deadline - time.monotonic()
                readable = select.select([notify, exited], [], [], remaining)[0] if remaining > 0 else []
                if notify in readable:
                    if b"READY=1" in notify.recv(4096).split(b"\n"):
                        return
                    continue
                reason = "exited" if exited in readable else f"did not say READY=1 within {GUARD_SECONDS:g}s"
                self._proc.kill()
                self._proc.wait()
                raise AssertionError(f"gpuschedd {reason}; its stderr:\n{self._stderr.read_text()[-4000:]}")
        finally:
            os.close(exited)

    def stop(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGTERM)
        self._proc.wait(timeout=GUARD_SECONDS)

    def close(self) -> None:
        if not self.running:
            self.start()  # it re-adopts what is left, so that it can be listed
        with GpuSched(self.socket) as sched:
            left: List[Process] = [p for p in sched.processes() if p.state != "exited" and p.init_pid > 0]
        self.stop()
        for process in left:
            try:
                os.kill(process.init_pid, signal.SIGKILL)  # ends its whole PID namespace
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
