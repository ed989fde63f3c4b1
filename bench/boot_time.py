"""boot_time: seconds from QEMU's start to the shell's first `$ ` (target ≤ 1.5 s).

Boots the same configuration several times (fresh QEMU each time, pristine image) and
prints the minimum and the median of QemuSession.boot_seconds, which the harness measures
from spawning QEMU to the first prompt.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import Figure, booted, build, main, median

from nexos.machine.config import BuildConfig

NAME = "boot_time"
TARGET_S = 1.5


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--runs", type=int, default=5, help="boots to time")


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg)
    times: list[float] = []
    for _ in range(max(1, args.runs)):
        with booted(cfg) as s:
            assert s.boot_seconds is not None
            times.append(s.boot_seconds)
    note = f"{cfg.name}, {len(times)} boots"
    return [Figure(NAME, "median", median(times), "s", TARGET_S, "le", note),
            Figure(NAME, "min", min(times), "s", TARGET_S, "le", note)]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
