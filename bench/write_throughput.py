"""write_throughput: sequential writes against sequential reads of the same file, in one boot.

Writes a file of --mib MiB twice with `writebench` (large writes of --buf-kib KiB, then one
4 KiB block per call as MIT's usertests writes), reading each back with `readbench` (256 KiB
reads) and removing it. Prints the MiB/s of each and the two ratios write/read; targets
(docs/filesystem.md): large writes ≥ 1/3 of the read, one-block writes ≥ 1/10.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main, number, run_line

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession

NAME = "write_throughput"
TARGET_LARGE = 1 / 3
TARGET_BLOCK = 1 / 10


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--mib", type=int, default=64, help="size of the file written")
    p.add_argument("--buf-kib", type=int, default=256, help="the large writes' buffer (KiB)")


def rate(s: QemuSession, cmd: str, prefix: str, mib: int) -> float:
    """Run one writebench/readbench line; its MiB/s, after checking the byte count."""
    f = run_line(s, cmd, prefix, timeout=900)
    if number(f, "bytes", cmd) != mib << 20:
        raise BenchError(f"{cmd} moved {f.get('bytes')} bytes, expected {mib << 20}")
    return number(f, "mibps", cmd)


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg)
    figures: list[Figure] = []
    with booted(cfg) as s:
        for label, kib, target in (("large writes", args.buf_kib, TARGET_LARGE),
                                   ("one-block writes", 4, TARGET_BLOCK)):
            w = rate(s, f"writebench /wb {args.mib} {kib}", "writebench ", args.mib)
            r = rate(s, "readbench /wb 256", "readbench ", args.mib)
            s.run("rm /wb", timeout=120)
            note = f"{args.mib} MiB, {kib} KiB writes, {cfg.name}"
            figures += [Figure(NAME, f"{label}", w, "MiB/s", note=note),
                        Figure(NAME, f"{label}: read back", r, "MiB/s"),
                        Figure(NAME, f"{label} / read", w / r, "×", target, "ge")]
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
