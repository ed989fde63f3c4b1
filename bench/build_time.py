"""build_time: full clean build of kernel + user programs + fs.img with `make -j2`
(target ≤ 20 s on 2 cores).

To stay clear of everybody else's builds it never runs `make clean` and never touches the
checkout's build/: it copies the checkout's tracked files into a temporary folder and times
`make -j2 LAZY_ALLOC=1 COW_ALLOC=1` there, from nothing (the host tool build/host/mkfs
included, ccache off: a true from-scratch figure).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import MAKE_JOBS, BenchError, Figure, main, repo

from nexos.course.lab.starter import source_files
from nexos.machine.build import error_excerpt, make_base
from nexos.machine.config import BuildConfig

NAME = "build_time"
TARGET_S = 20.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="the configuration to build")


def copy_sources(dest: Path) -> None:
    """The checkout's tracked files (what a fresh clone has) into dest."""
    r = repo()
    for f in source_files(r):
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(r / f, dest / f, follow_symlinks=False)


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    with tempfile.TemporaryDirectory(prefix="nexos-bench-") as tmp:
        tree = Path(tmp)
        copy_sources(tree)
        cmd = [*make_base(tree), f"-j{MAKE_JOBS}", "CCACHE=", *cfg.make_vars()]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
        seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise BenchError(f"make failed for {cfg.folder}", error_excerpt(proc.stdout))
    note = f"make -j{MAKE_JOBS} {' '.join(cfg.make_vars())} in a fresh copy, ccache off"
    return [Figure(NAME, "total from scratch (kernel+user+fs.img+mkfs)", seconds, "s",
                   TARGET_S, "le", note=note)]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
