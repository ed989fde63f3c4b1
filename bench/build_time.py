"""build_time: full clean build of kernel + user programs + fs.img with `make -j2`
(target ≤ 20 s on 2 cores).

To stay clear of everybody else's builds it never runs `make clean`: it uses a
configuration folder of its own (default lazy1-cow1-mem384, i.e. MEMSIZE=384), removes
just that folder, times `make -j2 LAZY_ALLOC=1 COW_ALLOC=1 MEMSIZE=384`, and removes the
folder again. The host tool build/host/mkfs is shared by all configurations and is not
rebuilt by make; its compile time is measured separately (into a temporary file) and
added, so that the total is a true from-scratch figure.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import BenchError, Figure, build, main, repo

from nexos.machine.config import DEFAULT_MEMSIZE, BuildConfig

NAME = "build_time"
TARGET_S = 20.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1-mem384",
                   help="a configuration folder nobody else uses (needs a non-default "
                        "MEMSIZE, -mem<MiB>); it is deleted before and after")
    p.add_argument("--keep", action="store_true", help="keep the folder afterwards")


def private_folder(cfg: BuildConfig) -> Path:
    """cfg's build folder, refusing the default-size folders that others build and use."""
    if cfg.memsize == DEFAULT_MEMSIZE:
        raise BenchError(f"refusing to delete build/{cfg.name}: others use it; pick a "
                         "configuration with a non-default MEMSIZE, e.g. lazy1-cow1-mem384")
    return cfg.build_dir(repo())


def mkfs_compile_seconds() -> float:
    """Time compiling the host mkfs tool the way the Makefile does, into a temporary file."""
    r = repo()
    with tempfile.TemporaryDirectory(prefix="nexos-bench-") as tmp:
        t0 = time.monotonic()
        proc = subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-I.", "-o",
                               str(Path(tmp) / "mkfs"), "mkfs/mkfs.c"],
                              cwd=r, capture_output=True, text=True)
        seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise BenchError("compiling mkfs/mkfs.c failed", proc.stderr)
    return seconds


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    folder = private_folder(cfg)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        make_s = build(cfg)  # args.no_build has no meaning here: building is the benchmark
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    mkfs_s = mkfs_compile_seconds()
    note = f"make -j2 {' '.join(cfg.make_vars())}"
    return [Figure(NAME, "make (kernel+user+fs.img)", make_s, "s", note=note),
            Figure(NAME, "host mkfs compile", mkfs_s, "s"),
            Figure(NAME, "total from scratch", make_s + mkfs_s, "s", TARGET_S, "le")]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
