"""Fixtures: the Go binaries (built once per session) and a fresh gpuschedd per test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator, Union

import pytest

from gpusched import GpuSched, Process
from harness import REPO_ROOT, Daemon, find_criu, guarded, short_dir

BINARIES = ("gpuschedd", "gpuschedctl", "gpusched-simjob")


@pytest.fixture(scope="session")
def bin_dir() -> Iterator[Path]:
    """$GPUSCHED_BIN_DIR, or the binaries built from this repository into a temporary directory."""
    if os.geteuid() != 0:
        pytest.skip("needs root: gpuschedd serves a root-owned socket and runs processes as their callers")
    prebuilt = os.environ.get("GPUSCHED_BIN_DIR")
    if prebuilt:
        yield Path(prebuilt)
        return
    if REPO_ROOT is None:
        pytest.skip("no go.mod above the SDK: set $GPUSCHED_BIN_DIR to a directory with the gpusched binaries")
    if shutil.which("go") is None:
        pytest.skip("needs `go` to build gpuschedd, or $GPUSCHED_BIN_DIR with prebuilt binaries")
    out = short_dir()
    build = subprocess.run(
        ["go", "build", "-o", str(out)] + [f"./cmd/{name}" for name in BINARIES],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )
    if build.returncode != 0:
        shutil.rmtree(out)
        pytest.fail(f"go build failed:\n{build.stderr}")
    yield out
    shutil.rmtree(out)


@pytest.fixture
def daemon(bin_dir: Path) -> Iterator[Daemon]:
    """A running gpuschedd on two simulated GPUs; torn down with every tree it left.

    Its disk tier runs on the CRIU scripts/install-criu.sh provides; without one
    it is off (``--criu none``), and ``daemon.criu`` says which."""
    d = Daemon(bin_dir, criu=find_criu()[0] or "none")
    d.start()
    yield d
    d.close()


@pytest.fixture
def plain_daemon(bin_dir: Path) -> Iterator[Daemon]:
    """A gpuschedd as ``daemon``, but always with the disk tier off (``--criu none``):
    what it answers does not depend on whether CRIU is installed."""
    d = Daemon(bin_dir, criu="none")
    d.start()
    yield d
    d.close()


@pytest.fixture
def sched(daemon: Daemon) -> Iterator[GpuSched]:
    """A client of the test's daemon."""
    with GpuSched(daemon.socket) as client:
        yield client


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    """A temporary directory with a path short enough for Unix sockets."""
    path = short_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


SimJob = Callable[..., Process]


@pytest.fixture
def simjob(bin_dir: Path, sched: GpuSched) -> SimJob:
    """``simjob(name, vram_mib, gpu=0)`` runs gpusched-simjob holding that much
    simulated VRAM and returns once it said it allocated it."""

    def start(name: str, vram_mib: int, gpu: Union[int, str] = 0) -> Process:
        process = sched.run(name, [str(bin_dir / "gpusched-simjob"), "--vram", str(vram_mib)], gpu=gpu)
        with guarded(sched.follow_logs(name)) as lines:
            for line in lines:
                if line.startswith("simjob: allocated"):
                    assert line == f"simjob: allocated {vram_mib} MiB on {process.gpus[0].uuid}"
                    return process
        raise AssertionError(f"{name} never allocated its memory; its log: {sched.logs(name)}")

    return start
