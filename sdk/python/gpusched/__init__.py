"""gpusched: the Python SDK of gpuschedd, the GPU process daemon.

Standard library only. Start with :class:`GpuSched`::

    import os
    from gpusched import GpuSched

    with GpuSched() as sched:
        sched.run("train", ["python3", "train.py"], gpu=0, env=dict(os.environ))
        for line in sched.follow_logs("train"):
            print(line)

Freeze parks a process's GPU memory in host RAM and thaw brings it back;
``sched.swap("policy", "reward")`` does both at once (see the README).
``hibernate`` moves a process to disk with CRIU (thaw brings it back), and
``fork`` starts copies of one from a single image.

Jobs queue with a declared VRAM and start the moment it fits; leases hand GPUs to
code the daemon does not launch::

    with GpuSched() as sched:
        job = sched.submit(["python3", "eval.py"], vram="18G", env=dict(os.environ))
        print(sched.wait_job(job.name).state)
        with sched.lease(gpus=2, min_free="20G", timeout=600) as lease:
            lease.apply()                      # CUDA_VISIBLE_DEVICES, before CUDA starts
            ...

RL loops hand one GPU back and forth between models; ``active`` thaws one and
freezes what must make room (only when both do not fit)::

    for step in range(steps):
        with sched.active("policy"):
            rollouts = generate()
        with sched.active("reward"):
            scores = score(rollouts)

Inside a managed process, ``auto_priority()`` applies the priority the daemon gave
it (nice on every thread, and a high-priority CUDA stream with PyTorch).

A memory filler holds a GPU's total usage at a target, reserved for your own jobs
and thaws (handed over before they start)::

    with GpuSched() as sched:
        with sched.fill(1, ratio=0.95, session=True) as filler:
            print(filler.held_mib, sched.fillers())
"""

from .active import Activation
from .client import DEFAULT_SOCKET, PROTOCOL_VERSION, SOCKET_ENV, Duration, GpuSched, GPURef, Size, Stream, socket_path
from .priority import PrioritySetting, PriorityWarning, auto_priority, inject_priority
from .errors import (
    BadRequest,
    Conflict,
    ConnectionLost,
    DaemonNotRunning,
    Exists,
    GpuSchedError,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProtocolError,
    ResourceExhausted,
    Timeout,
    TooLarge,
    Unavailable,
    UnknownMethod,
)
from .types import (
    GPU,
    JOB_FINAL_STATES,
    JOB_STATES,
    LIST_CMD_BYTES,
    Attempt,
    CheckpointResult,
    Event,
    Exit,
    Filler,
    ForkResult,
    GPUProcess,
    GPUSummary,
    Hello,
    HibernateResult,
    Identity,
    Job,
    Lease,
    LeaseGPU,
    Policy,
    Process,
    ProcessGPU,
    RmFailure,
    RmResult,
    Snapshot,
    Status,
    SwapResult,
)

__version__ = "1.0.0"
"""The SDK's version; its major number is the wire protocol it speaks (:data:`PROTOCOL_VERSION`)."""

__all__ = [
    "GpuSched",
    "Activation",
    "auto_priority",
    "inject_priority",
    "PrioritySetting",
    "PriorityWarning",
    "Stream",
    "GPURef",
    "Duration",
    "Size",
    "PROTOCOL_VERSION",
    "DEFAULT_SOCKET",
    "SOCKET_ENV",
    "socket_path",
    "Process",
    "Exit",
    "ProcessGPU",
    "GPU",
    "GPUProcess",
    "GPUSummary",
    "Hello",
    "Identity",
    "Status",
    "Event",
    "CheckpointResult",
    "SwapResult",
    "Policy",
    "HibernateResult",
    "ForkResult",
    "RmResult",
    "RmFailure",
    "Snapshot",
    "Job",
    "Attempt",
    "JOB_STATES",
    "JOB_FINAL_STATES",
    "LIST_CMD_BYTES",
    "Lease",
    "LeaseGPU",
    "Filler",
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
]
