"""compare_time: wall time of `nexos compare` with the images already built
(target ≤ 40 s on 2 cores).

Builds the two configurations `nexos compare` boots (lazy0-cow0 and lazy1-cow0, with the
LLM image) first, unless --no-build, and then times `nexos compare --no-build` as a user
runs it: two QEMUs side by side, smolprobe's default request in each, one table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchlib import BenchError, Figure, build, main, repo

from nexos.machine.config import BuildConfig

NAME = "compare_time"
TARGET_S = 40.0
COMPARE_CONFIGS = (BuildConfig(0, 0), BuildConfig(1, 0))  # eager vs lazy, as nexos compare


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--show", action="store_true", help="print nexos compare's own output")


def timed_nexos(args: list[str], show: bool, what: str) -> tuple[float, int, str]:
    """Run `python -m nexos ARGS` in the checkout; (seconds, exit status, output)."""
    t0 = time.monotonic()
    env = {**os.environ, "COLUMNS": "160"}  # room for the table when --show prints it
    proc = subprocess.run([sys.executable, "-m", "nexos", *args], cwd=repo(), env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    seconds = time.monotonic() - t0
    if show:
        print(proc.stdout)
    if proc.returncode not in (0, 1) or "Traceback" in proc.stdout:
        raise BenchError(f"{what} exited with status {proc.returncode}", proc.stdout[-2000:])
    return seconds, proc.returncode, proc.stdout


def measure(args: argparse.Namespace) -> list[Figure]:
    if not args.no_build:
        for cfg in COMPARE_CONFIGS:
            build(cfg, llm=True)
    seconds, status, out = timed_nexos(["compare", "--no-build"], args.show, "nexos compare")
    if status != 0:
        raise BenchError("nexos compare reported a failed run (exit 1)", out[-2000:])
    return [Figure(NAME, "nexos compare", seconds, "s", TARGET_S, "le",
                   "lazy0-cow0 vs lazy1-cow0, images built")]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
