#!/usr/bin/env python3
"""RL hand-off on one GPU: a "policy" and a "reward" model take turns on it.

Each step makes the policy resident (to generate rollouts), then the reward model
(to score them), with ``sched.active()``: whichever is frozen is thawed, and the
other is frozen to make room only when both do not fit. Only these two are ever
frozen (``evict``): other processes of yours on the GPU are left alone. The two models here are
``gpusched-simjob`` processes holding simulated GPU memory, so this runs against a
daemon started with ``--sim`` (``make demo`` does); on a real GPU, put your own
commands in ``--policy-cmd``/``--reward-cmd``.

    GPUSCHED_SOCKET=/run/gpusched/gpusched.sock python3 examples/rl_swap.py --steps 20

It prints what each phase cost: the whole activation as the daemon timed it, and
its freeze and thaw times.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sdk" / "python"))  # the SDK from this checkout, unless it is installed

from gpusched import GpuSched, GpuSchedError  # noqa: E402


def simjob() -> str:
    """gpusched-simjob from this checkout's bin/, else from PATH."""
    built = REPO / "bin" / "gpusched-simjob"
    found = str(built) if built.exists() else shutil.which("gpusched-simjob")
    if not found:
        sys.exit("rl_swap: gpusched-simjob not found: run `make build`, or pass --policy-cmd and --reward-cmd")
    return found


def start(sched: GpuSched, name: str, cmd: List[str], gpu: int, started: List[str]) -> None:
    """Runs a model and waits until it says it holds its memory (simjob: "allocated")."""
    sched.run(name, cmd, gpu=gpu, env=dict(os.environ))
    started.append(name)
    with sched.follow_logs(name, lines=-1) as lines:
        for line in lines:
            if "allocated" in line or "ready" in line:
                return
    sys.exit(f"rl_swap: {name} exited before it was ready; its log:\n" + "\n".join(sched.logs(name)))


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="policy/reward rounds (default 10)")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU both take turns on (default 0)")
    parser.add_argument("--vram", type=int, default=13000, help="MiB each simulated model holds (default 13000)")
    parser.add_argument("--policy-cmd", help="the policy's command line (default: a simjob)")
    parser.add_argument("--reward-cmd", help="the reward model's command line (default: a simjob)")
    parser.add_argument("--socket", help="the daemon's socket (default: $GPUSCHED_SOCKET or the default path)")
    args = parser.parse_args(argv)

    default = [simjob(), "--vram", str(args.vram)] if not (args.policy_cmd and args.reward_cmd) else []
    policy_cmd = shlex.split(args.policy_cmd) if args.policy_cmd else default
    reward_cmd = shlex.split(args.reward_cmd) if args.reward_cmd else default

    timings: Dict[str, List[float]] = {}

    def record(phase: str, value: float) -> None:
        timings.setdefault(phase, []).append(value)

    started: List[str] = []
    with GpuSched(args.socket, timeout=120) as sched:
        try:
            start(sched, "reward", reward_cmd, args.gpu, started)
            sched.freeze("reward")
            start(sched, "policy", policy_cmd, args.gpu, started)
            for step in range(args.steps):
                with sched.active("policy", evict=["reward"]) as on:
                    pass  # generate rollouts here
                with sched.active("reward", evict=["policy"]) as scoring:
                    pass  # score them here
                for phase, activation in (("policy", on), ("reward", scoring)):
                    record(f"activate {phase}", activation.ms["total"])
                    if activation.thaw is not None:
                        record("daemon thaw", activation.thaw.ms.get("total", 0.0))
                    for frozen in activation.frozen:
                        record("daemon freeze", frozen.ms.get("total", 0.0))
                print(f"step {step + 1}/{args.steps}: policy {on.ms['total']:.1f} ms, reward {scoring.ms['total']:.1f} ms",
                      flush=True)
        except GpuSchedError as e:
            print(f"rl_swap: {e}", file=sys.stderr)
            return 1
        finally:
            for name in started:
                try:
                    sched.kill(name)
                    sched.rm(name)
                except GpuSchedError:
                    pass  # already gone

    print(f"\n{'phase':<18}{'n':>5}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for phase, values in timings.items():
        print(f"{phase:<18}{len(values):>5}{statistics.mean(values):>10.1f}{percentile(values, 0.5):>10.1f}"
              f"{percentile(values, 0.99):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
