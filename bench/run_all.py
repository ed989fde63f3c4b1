"""Run every NexOS benchmark in order and print a summary table (rich).

    python bench/run_all.py [--no-build] [--run-grade] [--run-suite] [--only a,b] [--skip a,b]

Each benchmark prints its own lines as it goes; the table at the end collects every figure
with its target. Nothing passes or fails on time: the exit status is 1 only when a
benchmark broke (build failure, kernel panic, unparsable output), and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from types import ModuleType

from benchlib import Figure, failure_text, fmt, load_note, make_parser, unit_sep
from rich.console import Console
from rich.table import Table

BENCHES = ("build_time", "boot_time", "read_throughput", "fork_cow", "smolprobe_speed",
           "smolprobe_int8", "smolprobe_real", "first_token", "inference_speed",
           "cow_parallel",
           "smolserve_capacity", "smolserve_prefix", "smolserve_weights", "swap_pagein",
           "swap_shared", "smolserve_swap",
           "compare_time", "grade_time", "suite_time")


def names(text: str | None) -> list[str]:
    got = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in got if n not in BENCHES]
    if unknown:
        raise SystemExit(f"run_all: unknown benchmark(s) {', '.join(unknown)}; "
                         f"known: {', '.join(BENCHES)}")
    return got


def bench_args(mod: ModuleType, top: argparse.Namespace) -> argparse.Namespace:
    """The module's default arguments, with the shared flags from the command line."""
    args = make_parser(mod.__doc__ or mod.__name__, mod.add_args).parse_args([])
    args.no_build = top.no_build
    if hasattr(args, "run_grade"):
        args.run_grade = top.run_grade
    if hasattr(args, "run_suite"):
        args.run_suite = top.run_suite
    return args


def run_one(name: str, top: argparse.Namespace, console: Console
            ) -> tuple[list[Figure], str | None, float]:
    """(figures, breakage text or None, seconds) of one benchmark."""
    mod = importlib.import_module(name)
    console.rule(name)
    t0 = time.monotonic()
    try:
        figs = mod.measure(bench_args(mod, top))
    except Exception as e:  # noqa: BLE001 (a real bug re-raises below)
        text = failure_text(e)
        if text is None:
            raise
        console.print(f"{name}: broken: {text}", markup=False, highlight=False)
        return [], text.splitlines()[0], time.monotonic() - t0
    for f in figs:
        console.print(f.line(), markup=False, highlight=False)
    return figs, None, time.monotonic() - t0


def summary(rows: list[tuple[str, list[Figure], str | None, float]]) -> Table:
    t = Table(title="NexOS benchmarks")
    for col in ("benchmark", "figure", "value", "target", "vs target", "note"):
        t.add_column(col, overflow="fold")
    for name, figs, broken, _ in rows:
        if broken is not None:
            t.add_row(name, "", "", "", "[red]broken[/]", broken[:100])
        elif not figs:
            t.add_row(name, "", "", "", "skipped", "")
        for f in figs:
            verdict = {True: "[green]met[/]", False: "[yellow]missed[/]", None: ""}[f.met]
            t.add_row(name, f.name, f"{fmt(f.value)}{unit_sep(f.unit)}{f.unit}",
                      f.target_text, verdict, f.note)
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-build", action="store_true", help="use the builds already in build/")
    p.add_argument("--run-grade", action="store_true", help="also time nexos grade (long)")
    p.add_argument("--run-suite", action="store_true", help="also time the whole test suite")
    p.add_argument("--only", help="comma-separated benchmarks to run")
    p.add_argument("--skip", help="comma-separated benchmarks to leave out")
    top = p.parse_args()
    only, skip = names(top.only), names(top.skip)
    console = Console(width=None if sys.stdout.isatty() else 150)
    rows = []
    try:
        for name in BENCHES:
            if (only and name not in only) or name in skip:
                continue
            rows.append((name, *run_one(name, top, console)))
    except KeyboardInterrupt:
        console.print("run_all: interrupted")
        return 130
    console.print(summary(rows))
    console.print(f"({load_note()})", highlight=False)
    return 1 if any(r[2] is not None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
