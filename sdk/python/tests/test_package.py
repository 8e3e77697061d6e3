"""The package as users get it: ``pip install ./sdk/python``, its version, its types."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpusched
from harness import REPO_ROOT, Daemon

SDK = Path(gpusched.__file__).resolve().parent.parent


def test_version_follows_the_protocol() -> None:
    pyproject = (SDK / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == gpusched.__version__  # type: ignore[union-attr]
    assert int(gpusched.__version__.split(".")[0]) == gpusched.PROTOCOL_VERSION
    if REPO_ROOT is not None:
        go = (REPO_ROOT / "pkg" / "api" / "envelope.go").read_text()
        assert int(re.search(r"const ProtocolVersion = (\d+)", go).group(1)) == gpusched.PROTOCOL_VERSION  # type: ignore[union-attr]


def test_pip_install_and_use(tmp_path: Path, daemon: Daemon) -> None:
    """Installs into a fresh venv, offline (``--no-build-isolation`` uses Debian's
    setuptools and wheel instead of fetching them), and calls the daemon from there."""
    source = tmp_path / "src"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("tests", "bench", "__pycache__", ".mypy_cache", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-index", str(source)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    script = (
        "import gpusched, pathlib, sys\n"
        "package = pathlib.Path(gpusched.__file__).parent\n"
        "assert (package / 'py.typed').is_file(), 'py.typed is not installed'\n"
        "hello = gpusched.GpuSched(sys.argv[1]).hello()\n"
        "print(package, gpusched.__version__, hello.protocol, hello.backend)\n"
    )
    used = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, daemon.socket], capture_output=True, text=True, cwd="/"
    )
    assert used.returncode == 0, used.stderr
    where, version, protocol, backend = used.stdout.split()
    assert where.startswith(str(venv)) and version == gpusched.__version__
    assert (int(protocol), backend) == (gpusched.PROTOCOL_VERSION, "sim")


def test_types_check_strictly() -> None:
    """The package is typed (py.typed): mypy --strict finds nothing, for Python 3.9."""
    pytest.importorskip("mypy", reason="needs Debian's python3-mypy (scripts/test-deps.sh installs it)")
    check = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.9", "--no-incremental", "gpusched"],
        cwd=SDK, capture_output=True, text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_swap_overhead_benchmark_runs(bin_dir: Path) -> None:
    """The benchmark behind `make bench-sdk`, two steps: it runs, and reports (no timing asserted)."""
    bench = SDK / "bench" / "swap_overhead.py"
    run = subprocess.run(
        [sys.executable, str(bench), "--steps", "2"], env={"GPUSCHED_BIN_DIR": str(bin_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "swap: 2 calls each" in run.stdout and "status: 2 calls each" in run.stdout
    assert re.search(r"^SDK per-swap overhead over a raw socket client: -?\d+\.\d+ ms", run.stdout, re.M), run.stdout
