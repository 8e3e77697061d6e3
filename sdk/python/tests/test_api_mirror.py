"""The SDK mirrors pkg/api: every protocol method has a client method, every
params field an argument, and every field of a result type a dataclass field.

Read from the Go sources, so a field added to the protocol without the SDK fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Dict, List, Set

import pytest

import gpusched
from gpusched import GpuSched
from harness import REPO_ROOT

if REPO_ROOT is None:
    pytest.skip("needs the repository's pkg/api sources", allow_module_level=True)

API = REPO_ROOT / "pkg" / "api"
_STRUCT = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.S | re.M)
_FIELD = re.compile(r'^\t(\w+)\s+[^`\n]*`json:"([^",]*)[^"]*"`', re.M)
_EMBEDDED = re.compile(r"^\t([A-Z]\w*)\s*(?://.*)?$", re.M)


def go_structs() -> Dict[str, Set[str]]:
    """The JSON field names of every struct in pkg/api, embedded structs inlined."""
    bodies: Dict[str, str] = {}
    for path in sorted(API.glob("*.go")):
        if not path.name.endswith("_test.go"):
            bodies.update(_STRUCT.findall(path.read_text()))

    def fields(name: str) -> Set[str]:
        body = bodies[name]
        names = {tag for _, tag in _FIELD.findall(body) if tag not in ("", "-")}
        for embedded in _EMBEDDED.findall(body):
            names |= fields(embedded)
        return names

    return {name: fields(name) for name in bodies}


def go_methods() -> List[str]:
    return re.findall(r'^\tMethod\w+\s*=\s*"(\w+)"', (API / "methods.go").read_text(), re.M)


STRUCTS = go_structs()

# The client method that sends each protocol method, and its arguments' wire names where they differ.
METHODS = {
    "hello": ("hello", None, {}),
    "run": ("run", "RunParams", {}),
    "kill": ("kill", "KillParams", {}),
    "status": ("status", "StatusParams", {}),
    "ps": ("processes", "PSParams", {}),
    "logs": ("follow_logs", "LogsParams", {"follow": None}),
    "wait": ("wait", "WaitParams", {}),
    "rm": ("remove", "RmParams", {"name": None}),
    "events": ("events", "EventsParams", {}),
    "gpus": ("gpus", None, {}),
    "freeze": ("freeze", "FreezeParams", {}),
    "thaw": ("thaw", "ThawParams", {}),
    "swap": ("swap", "SwapParams", {"freeze": "off", "thaw": "on"}),
    "activate": ("activate", "ActivateParams", {"hold": None}),  # hold: active()
    "migrate": ("migrate", "MigrateParams", {"gpus": "gpu"}),
    "hibernate": ("hibernate", "HibernateParams", {}),
    "fork": ("fork", "ForkParams", {}),
    "snapshots": ("snapshots", "SnapshotsParams", {}),
    "delete_snapshot": ("delete_snapshot", "DeleteSnapshotParams", {}),
    "set": ("set_policy", "SetParams", {}),
    "submit": ("submit", "JobSpec", {}),
    "jobs": ("jobs", "JobsParams", {}),
    "job": ("job", "JobParams", {}),
    "cancel": ("cancel", "NameParams", {}),
    "job_wait": ("wait_job", "JobWaitParams", {}),
    "prune_jobs": ("prune_jobs", "PruneJobsParams", {}),
    "acquire": ("acquire", "AcquireParams", {}),
    "release": ("release", "ReleaseParams", {"id": "lease_or_id"}),
    "leases": ("leases", None, {}),
    "fill": ("fill", "FillParams", {}),
    "unfill": ("unfill", "UnfillParams", {}),
    "fillers": ("fillers", None, {}),
}

# Wire result types that the SDK returns as a dataclass of the same name.
RESULT_TYPES = [
    "Exit", "Identity", "ProcessGPU", "Process", "Policy", "GPUProcess", "GPU", "GPUSummary", "Hello",
    "Status", "Event", "CheckpointResult", "SwapResult", "Activation", "HibernateResult", "ForkResult", "Snapshot",
    "Job", "Attempt", "Lease", "LeaseGPU", "Filler", "RmResult", "RmFailure",
]


def test_every_protocol_method_has_a_client_method() -> None:
    assert sorted(go_methods()) == sorted(METHODS)
    for method, (attr, _, _) in METHODS.items():
        assert callable(getattr(GpuSched, attr, None)), f"no GpuSched.{attr} for {method}"


@pytest.mark.parametrize("method", sorted(m for m, (_, params, _) in METHODS.items() if params))
def test_every_params_field_is_an_argument(method: str) -> None:
    attr, params, renamed = METHODS[method]
    arguments = set(inspect.signature(getattr(GpuSched, attr)).parameters) - {"self"}
    wire = {renamed.get(name, name) for name in STRUCTS[params]} - {None}
    missing = sorted(name for name in wire if name not in arguments)
    assert not missing, f"GpuSched.{attr} lacks arguments for {params} fields {missing}"


@pytest.mark.parametrize("name", RESULT_TYPES)
def test_every_result_field_is_a_dataclass_field(name: str) -> None:
    cls = getattr(gpusched, name)
    python = {f.name for f in dataclasses.fields(cls)}
    missing = sorted(STRUCTS[name] - python)
    assert not missing, f"gpusched.{name} lacks the wire fields {missing}"


def test_submit_many_takes_every_job_spec_field() -> None:
    from gpusched.client import _JOB_SPEC_FIELDS

    assert set(_JOB_SPEC_FIELDS) == STRUCTS["JobSpec"]
