"""course_usertests: a course's own usertests.c (MIT 6.1810's, unmodified) under `usertests -q`
in every configuration (target: `ALL TESTS PASSED` in each, in ≤ 3 min).

    .venv/bin/python bench/course_usertests.py PATH/TO/usertests.c [--configs lazy1-cow1,...]

The file is the course's, not ours: it is never copied into the tree. Each configuration is
built at the default MEMSIZE with `EXTRA_UPROGS=PATH` (the course's program replaces the
built-in usertests on the image, docs/userland.md), booted on one hart, and `usertests -q`
runs; the figure is its wall time. A run that does not end in `ALL TESTS PASSED` breaks the
bench (exit 1, with the failing test's lines). Afterwards each configuration is built again
without it, so the checkout's images carry the tree's own usertests as before.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchlib import BenchError, Figure, booted, build, main, repo

from nexos.machine.build import build_one
from nexos.machine.config import matrix
from nexos.parse import find_panic

NAME = "course_usertests"
TARGET_S = 180.0
CMD = "usertests -q"
PASSED = "ALL TESTS PASSED"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("usertests", type=Path, help="the course's usertests.c (stays where it is)")
    p.add_argument("--configs", default="all",
                   help="comma-separated configurations (lazy1-cow1,...), or all four")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")


def measure(args: argparse.Namespace) -> list[Figure]:
    src = args.usertests.resolve()
    if not src.is_file() or src.name != "usertests.c":
        raise BenchError(f"{args.usertests}: not a file named usertests.c")
    names = None if args.configs == "all" else args.configs.split(",")
    configs = [c for c in matrix() if names is None or c.name in names]
    if not configs:
        raise BenchError(f"--configs {args.configs}: no such configuration")
    figures = []
    for cfg in configs:
        res = build_one(repo(), cfg, extra=("-j2", f"EXTRA_UPROGS={src}"))
        if not res.ok:
            raise BenchError(f"make EXTRA_UPROGS={src} failed for {cfg.name}", res.excerpt)
        try:
            with booted(cfg) as s:
                t0 = time.monotonic()
                out = s.run(CMD, timeout=args.timeout).output
                seconds = time.monotonic() - t0
        finally:
            build(cfg)   # the tree's own usertests back on the image
        if find_panic(out) is not None:
            raise BenchError(f"`{CMD}` on {cfg.name}: kernel panic", out[-1500:])
        if PASSED not in out:
            raise BenchError(f"`{CMD}` on {cfg.name} did not print {PASSED}", out[-1500:])
        ntests = sum(1 for ln in out.splitlines() if ln.startswith("test "))
        figures.append(Figure(NAME, f"usertests -q {cfg.name}", seconds, "s", TARGET_S, "le",
                              note=f"{PASSED}, {ntests} tests, {cfg.memsize} MiB, 1 hart"))
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
