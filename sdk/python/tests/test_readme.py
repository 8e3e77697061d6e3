"""The README's Python SDK example is examples/quickstart.py, and it runs as it stands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched import GpuSched
from harness import REPO_ROOT, Daemon

if REPO_ROOT is None:
    pytest.skip("needs the repository's README.md and examples/", allow_module_level=True)

QUICKSTART = REPO_ROOT / "examples" / "quickstart.py"


def readme_example() -> str:
    """The python block of the README's "Python SDK" section."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("\n## Python SDK\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert found, "the README's Python SDK section has no python block"
    return found.group(1)


def test_readme_example_is_the_quickstart() -> None:
    code = readme_example()
    assert code in QUICKSTART.read_text(), "README.md's Python SDK example differs from examples/quickstart.py"
    assert code.startswith("import os\n"), "the README's example must stand alone, imports included"


def test_quickstart_runs(daemon: Daemon, sched: GpuSched, bin_dir: Path) -> None:
    """As the README says to run it: from the repository root, the SDK on PYTHONPATH."""
    run = subprocess.run(
        [sys.executable, str(QUICKSTART)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env={"GPUSCHED_SOCKET": daemon.socket, "PYTHONPATH": str(REPO_ROOT / "sdk" / "python"),
             "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines[:2]] == ["policy running", "reward frozen"], run.stdout
    assert [line.split(", froze ")[1] for line in lines if line.startswith("step ")] == ["['policy']"] * 3
    assert re.fullmatch(r"leased GPU-\S+", lines[-1]), run.stdout
    assert sched.processes() == []  # it removes what it started
