#!/usr/bin/env python3
"""Per-swap overhead of the SDK over a raw socket client, on the simulated driver.

Starts its own gpuschedd (root; binaries from $GPUSCHED_BIN_DIR, default ./bin)
on one simulated GPU that holds one of two models at a time, then runs a swap
loop: STEPS swaps through ``GpuSched.swap`` and STEPS through a bare client (one
socket, one JSON line out, one line back), interleaved in pairs so that both see
the same daemon and machine. Each swap freezes one model and thaws the other.

The overhead is the SDK's wall time per swap minus the raw client's, and the
client's own CPU time per call (what the SDK does besides waiting for the
daemon). A status loop gives the same comparison without the driver's time.

    make bench-sdk                     # or: sudo python3 sdk/python/bench/swap_overhead.py --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests")]

from gpusched import GpuSched  # noqa: E402
from harness import REPO_ROOT, Daemon, guarded  # noqa: E402


class RawClient:
    """The least a client can do: one request line out, one response line back."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")
        self.next_id = 0

    def call(self, method: str, params: Dict[str, str]) -> Dict[str, object]:
        self.next_id += 1
        self.sock.sendall(json.dumps({"id": self.next_id, "method": method, "params": params}).encode() + b"\n")
        reply = json.loads(self.reader.readline())
        if not reply.get("ok"):
            raise RuntimeError(f"{method}: {reply}")
        return reply["result"]


Sample = Tuple[float, float]  # wall seconds, client CPU seconds


def timed(call: Callable[[], object]) -> Sample:
    wall, cpu = time.perf_counter(), time.thread_time()
    call()
    return time.perf_counter() - wall, time.thread_time() - cpu


def summary(samples: List[Sample]) -> Dict[str, float]:
    walls = sorted(w * 1e3 for w, _ in samples)
    return {
        "mean": statistics.mean(walls),
        "p50": walls[len(walls) // 2],
        "p99": walls[min(len(walls) - 1, int(0.99 * len(walls)))],
        "cpu": statistics.mean(c * 1e3 for _, c in samples),
    }


def loop(steps: int, sdk_call: Callable[[int], object], raw_call: Callable[[int], object]) -> Tuple[List[Sample], List[Sample]]:
    """``steps`` calls each, interleaved in pairs that alternate which client goes first."""
    sdk: List[Sample] = []
    raw: List[Sample] = []
    for i in range(steps):
        first, second = ((sdk, sdk_call), (raw, raw_call)) if i % 2 else ((raw, raw_call), (sdk, sdk_call))
        first[0].append(timed(lambda: first[1](2 * i)))
        second[0].append(timed(lambda: second[1](2 * i + 1)))
    return sdk, raw


def report(what: str, sdk: List[Sample], raw: List[Sample]) -> float:
    s, r = summary(sdk), summary(raw)
    print(f"{what}: {len(sdk)} calls each")
    print(f"  {'client':<8}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}{'client CPU ms':>15}")
    for name, row in (("raw", r), ("sdk", s)):
        print(f"  {name:<8}{row['mean']:>10.3f}{row['p50']:>10.3f}{row['p99']:>10.3f}{row['cpu']:>15.3f}")
    overhead = s["mean"] - r["mean"]
    print(f"  SDK overhead: {overhead:+.3f} ms mean, {s['p50'] - r['p50']:+.3f} ms p50, "
          f"{s['cpu'] - r['cpu']:+.3f} ms client CPU per call")
    return overhead


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="swaps per client (default 200)")
    parser.add_argument("--vram", type=int, default=1200, help="MiB each model holds (default 1200, on a 2 GiB GPU)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("swap_overhead: run as root (the daemon runs processes as their callers)")
    bin_dir = Path(os.environ.get("GPUSCHED_BIN_DIR") or (REPO_ROOT or Path.cwd()) / "bin")

    daemon = Daemon(bin_dir, criu="none", args=["--sim", "1x2G"])
    daemon.start()
    try:
        with GpuSched(daemon.socket, timeout=60) as sched:
            for name in ("reward", "policy"):
                sched.run(name, [str(bin_dir / "gpusched-simjob"), "--vram", str(args.vram)], gpu=0)
                with guarded(sched.follow_logs(name)) as lines:
                    next(line for line in lines if line.startswith("simjob: allocated"))
                if name == "reward":
                    sched.freeze("reward")
            raw = RawClient(daemon.socket)
            order = ("policy", "reward")

            def sdk_swap(i: int) -> object:
                return sched.swap(order[i % 2], order[(i + 1) % 2])

            def raw_swap(i: int) -> object:
                return raw.call("swap", {"freeze": order[i % 2], "thaw": order[(i + 1) % 2]})

            sched.status()  # connect before timing
            print(f"gpuschedd on one simulated 2 GiB GPU, two {args.vram} MiB models (they do not fit together), "
                  f"sim driver at 20 ms/GiB; {os.cpu_count()} CPUs")
            overhead = report("swap", *loop(args.steps, sdk_swap, raw_swap))
            report("status", *loop(args.steps, lambda i: sched.status(), lambda i: raw.call("status", {})))
            print(f"SDK per-swap overhead over a raw socket client: {overhead:.3f} ms (target < 1 ms)")
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
