"""read_throughput: sequential read of a 128 MiB file inside the guest (target ≥ 50 MiB/s).

Builds a private image in a temporary folder with build/host/mkfs: the configuration's
usual programs (its image.list) plus /big, a 128 MiB file. Boots it (snapshot=on) and runs
`readbench /big BUFKIB` several times; the first run reads a cold buffer cache. Prints the
first and the best MiB/s as readbench measured them with clock_us() in the guest.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import BenchError, Figure, booted, build, main, number, repo, run_line

from nexos.machine.config import BuildConfig

NAME = "read_throughput"
TARGET_MIBPS = 50.0
SPARE_MIB = 64  # room on the image besides the big file (programs, log, inodes)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--mib", type=int, default=128, help="size of the file read")
    p.add_argument("--buf-kib", type=int, default=256, help="readbench's buffer (KiB)")
    p.add_argument("--runs", type=int, default=3, help="reads of the file in one boot")


def write_host_file(path: Path, mib: int) -> None:
    """A file of `mib` MiB with non-zero, non-repeating-per-block content."""
    block = bytes((i * 131 + 7) & 0xFF for i in range(1 << 20))
    with open(path, "wb") as f:
        for i in range(mib):
            f.write(i.to_bytes(8, "little") + block[8:])


def make_image(cfg: BuildConfig, folder: Path, mib: int) -> Path:
    """fs image in `folder` with the configuration's programs and /big (mib MiB)."""
    r = repo()
    listing = cfg.build_dir(r) / "image.list"
    if not listing.is_file():
        raise BenchError(f"{listing} is missing; build {cfg.name} first")
    big, image = folder / "big.bin", folder / "fs-read.img"
    write_host_file(big, mib)
    cmd = [str(r / "build/host/mkfs"), str(image), str(mib + SPARE_MIB),
           *shlex.split(listing.read_text()), f"big={big}"]
    proc = subprocess.run(cmd, cwd=r, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError("mkfs failed", proc.stderr + proc.stdout)
    big.unlink()
    return image


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg)
    cmd = f"readbench /big {args.buf_kib}"
    rates: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nexos-bench-") as tmp:
        image = make_image(cfg, Path(tmp), args.mib)
        with booted(cfg, image=image) as s:
            for _ in range(max(1, args.runs)):
                f = run_line(s, cmd, "readbench ", timeout=600)
                if number(f, "bytes", cmd) != args.mib << 20:
                    raise BenchError(f"readbench read {f.get('bytes')} bytes, "
                                     f"expected {args.mib << 20}")
                rates.append(number(f, "mibps", cmd))
    note = f"{args.mib} MiB, {args.buf_kib} KiB reads, {cfg.name}"
    return [Figure(NAME, "first (cold)", rates[0], "MiB/s", TARGET_MIBPS, "ge", note),
            Figure(NAME, f"best of {len(rates)}", max(rates), "MiB/s", TARGET_MIBPS, "ge")]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
