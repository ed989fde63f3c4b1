"""grade_time: wall time of `nexos grade` over all four configurations
(target ≤ 15 min on 2 cores; with `--lab all`, every lab's plan: ≤ 10 min).

It takes many minutes, so it only runs with --run-grade (run_all.py passes that flag on
when given it); without the flag it prints that it was skipped. The four configurations
(and their LLM images) are built first unless --no-build, so that the figure is the
grading itself. A grade that finds failures still gives a time (the checks ran); the
number of failed checks is printed next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchlib import BenchError, Figure, build, main
from compare_time import timed_nexos

from nexos.course.grade import small_check_config
from nexos.machine.config import matrix

NAME = "grade_time"
TARGET_S = 15 * 60.0
LAB_TARGET_S = 10 * 60.0   # every lab's plan, the course's grade of a whole solution


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-grade", action="store_true",
                   help="really run nexos grade (long: many minutes)")
    p.add_argument("--lab", choices=("lazy", "cow", "mmap", "swap", "all"),
                   help="time `nexos grade --lab LAB` (a lab's plan) instead of the default "
                        "checks")
    p.add_argument("--show", action="store_true", help="print nexos grade's own output")


def failed_checks(json_path: Path) -> tuple[int, int]:
    """(failed, total) checks in nexos grade's --json file (0, 0 if it is unreadable)."""
    try:
        data = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return 0, 0
    rows = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return 0, 0
    failed = sum(1 for r in rows if isinstance(r, dict) and not r.get("passed", True))
    return failed, len(rows)


def measure(args: argparse.Namespace) -> list[Figure]:
    if not args.run_grade:
        print(f"{NAME}: skipped (pass --run-grade; it takes many minutes)")
        return []
    if not args.no_build:
        for cfg in matrix():
            build(cfg, llm=True)
            build(small_check_config(cfg))   # lazytests', cowtests' and swaptest's machine
    with tempfile.TemporaryDirectory(prefix="nexos-bench-") as tmp:
        jpath = Path(tmp) / "grade.json"
        lab = ["--lab", args.lab] if args.lab else []
        seconds, status, out = timed_nexos(["grade", "--no-build", *lab, "--json", str(jpath)],
                                           args.show, "nexos grade")
        failed, total = failed_checks(jpath)
    if total == 0:
        raise BenchError("nexos grade wrote no results", out[-2000:])
    note = f"4 configurations, {total} checks, {failed} failed (exit {status})"
    what = f"nexos grade --lab {args.lab}" if args.lab else "nexos grade"
    target = LAB_TARGET_S if args.lab == "all" else TARGET_S
    return [Figure(NAME, what, seconds / 60, "min", target / 60, "le", note)]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
