"""swap_shared: a working set walked while a cold region two processes share sits in RAM
(target: the last walk under 100 ms in every configuration).

Boots each configuration at MEMSIZE=128 with a 512 MiB swap disk and runs `swaptest
sharedcold` (user/tests/swaptest.c): a parent writes 90 MiB, forks a child that reads it all
and blocks in read(), then walks a 40 MiB working set of its own six times, one word a page.
With COW_ALLOC=1 the 90 MiB is one copy both map; unless reclaim can page out a page that
two page tables map, only the working set can leave RAM, and every walk reads it back from
swap. Prints the last walk's time per configuration (the test's own clock_us() figure),
with every walk's time and the shared pages written to swap in the note. A walk that the
test judges too slow is still a figure here: only a wrong word, a leak or a crash breaks
the bench.
"""

from __future__ import annotations

import argparse
import re
import sys

from benchlib import BenchError, Figure, booted, build, main, median, parse_kv_line

from nexos.machine.config import BuildConfig, matrix

NAME = "swap_shared"
TARGET_MS = 100.0
CMD = "swaptest sharedcold"
WALKS_RE = re.compile(r"walk_ms=([\d,]+)")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configs", default="all",
                   help="comma-separated configurations (lazy1-cow1,...), or all four")
    p.add_argument("--memsize", type=int, default=128, help="guest RAM (MiB)")
    p.add_argument("--swap", type=int, default=512, help="swap disk (MiB)")
    p.add_argument("--runs", type=int, default=2, help="runs of the scene per boot")


def walks(out: str) -> tuple[list[int], dict[str, str]]:
    """The walk times (ms) and key=value pairs of sharedcold's line, OK or FAILED: the test
    fails a walk it judges slow, and prints the times in that line too."""
    fields = parse_kv_line(out, "test sharedcold:", CMD)
    m = WALKS_RE.search([ln for ln in out.splitlines() if ln.startswith("test sharedcold:")][-1])
    if m is None:
        raise BenchError(f"`{CMD}` failed before its walks were timed", out[-1500:])
    return [int(x) for x in m[1].split(",")], fields


def measure_config(cfg: BuildConfig, runs: int) -> list[tuple[float, list[int], str]]:
    """Boot cfg and run the scene `runs` times: (last walk ms, walk times, shared outs)."""
    rows = []
    with booted(cfg) as s:
        for _ in range(max(1, runs)):
            out = s.run(CMD, timeout=900).output
            if "panic" in out:
                raise BenchError(f"`{CMD}` on {cfg.name}: kernel panic", out[-1500:])
            times, fields = walks(out)
            last = float(fields["last_walk_us"]) / 1000 if "last_walk_us" in fields else \
                float(times[-1])
            rows.append((last, times, fields.get("shared_outs", "?")))
    return rows


def measure(args: argparse.Namespace) -> list[Figure]:
    names = None if args.configs == "all" else args.configs.split(",")
    configs = [c for c in matrix(args.memsize, swapsize=args.swap)
               if names is None or c.name in names or f"lazy{c.lazy}-cow{c.cow}" in names]
    if not configs:
        raise BenchError(f"--configs {args.configs}: no such configuration")
    figures = []
    for cfg in configs:
        if not args.no_build:
            build(cfg)
        rows = measure_config(cfg, args.runs)
        note = "; ".join(f"walks {','.join(map(str, t))} ms, shared outs {o}"
                         for _, t, o in rows)
        figures.append(Figure(NAME, f"last walk {cfg.name}", median([r[0] for r in rows]),
                              "ms", TARGET_MS, "le",
                              note=f"{args.memsize} MiB RAM, {args.swap} MiB swap, median of "
                                   f"{len(rows)}: {note}"))
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
