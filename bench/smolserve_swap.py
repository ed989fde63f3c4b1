"""smolserve_swap: recompute against swap under memory pressure (docs/smolserve.md,
"Overcommit: recompute against swap"), for a short, a medium and a long workload.

The workloads are `nexos serve --swap`'s (nexos.programs.serve.PRESSURE_WORKLOADS): each asks the
same memory, its requests' reservations adding up to about 2.5x the free pages of a 208 MiB
guest (12 requests of 512 slots, 6 of 1024, 3 of 2048), and every first attempt fills its
reservation once its prompt is fed (--test-fill 1), all admitted at once (--overcommit 1).
Each runs on a fresh boot of lazy1-cow1 without swap and with a 512 MiB swap disk. Prints,
side by side, completed requests, recomputes, positions fed again, pages swapped out and
in, and the wall time from the start line to the last finish, and checks that both ways
give every request the same answer. There is no target: the table is the figure, as vLLM's
recompute-vs-swap comparison is.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, build, main, serve_run

from nexos.machine.config import BuildConfig
from nexos.programs.serve import (
    PRESSURE_MEMSIZE,
    PRESSURE_WORKLOADS,
    pressure_workloads,
    serve_command,
)
from nexos.records import ServeResult

NAME = "smolserve_swap"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--memsize", type=int, default=PRESSURE_MEMSIZE, help="guest RAM (MiB)")
    p.add_argument("--swap", type=int, default=512, help="swap disk (MiB) of the swap runs")


def answers(res: ServeResult) -> list[tuple[str, int]]:
    return [(r.id, r.answer_fnv) for r in res.requests]


def measure(args: argparse.Namespace) -> list[Figure]:
    base = BuildConfig.parse(args.config)
    figures: list[Figure] = []
    for (label, flags), (_, n, max_len) in zip(pressure_workloads(None), PRESSURE_WORKLOADS,
                                                strict=True):
        cmd = serve_command(flags)
        runs = {}
        for swap in (0, args.swap):
            cfg = BuildConfig(base.lazy, base.cow, memsize=args.memsize, cpus=2, swapsize=swap)
            if not args.no_build:
                build(cfg, llm=True)
            runs[swap] = serve_run(cfg, cmd)
        if answers(runs[0]) != answers(runs[args.swap]):
            raise BenchError(f"{label}: the answers differ with and without swap")
        for swap, res in runs.items():
            ps = res.pressure_summary
            if ps is None:
                raise BenchError(f"{label}: no PRESSURE_SUMMARY line")
            way = f"swap {swap} MiB" if swap else "no swap"
            note = f"{n} x {max_len} slots, {base.name}, {args.memsize} MiB"
            figures += [
                Figure(NAME, f"{label}, {way}: completed", ps.completed, f"of {n}", note=note),
                Figure(NAME, f"{label}, {way}: recomputed requests", ps.recomputed, ""),
                Figure(NAME, f"{label}, {way}: positions fed again", ps.recomputed_tokens, ""),
                Figure(NAME, f"{label}, {way}: pages swapped out", ps.swap_outs, ""),
                Figure(NAME, f"{label}, {way}: pages swapped in", ps.swap_ins, ""),
                Figure(NAME, f"{label}, {way}: wall time", ps.wall_ms / 1000, "s"),
            ]
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
