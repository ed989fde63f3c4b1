"""swap_pagein: sequential page-in from swap against the file system's sequential read, side
by side in one boot (target: page-in ≥ ½ of the read).

Boots the configuration (default lazy1-cow1) at MEMSIZE=128 with a 512 MiB swap disk and
read_throughput's private image (/big, a 128 MiB file). `readbench /big 256` reads the file;
`pagein 384` writes 3x RAM of heap, so that its first pages go out to swap, gives back all
but the first half of RAM's worth and reads those again in order (user/tests/pagein.c, read
back 32 pages per request by the kernel's read-ahead). Prints both rates as the guest
measured them with clock_us(), and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchlib import BenchError, Figure, booted, build, main, number, run_line
from read_throughput import make_image

from nexos.machine.config import BuildConfig

NAME = "swap_pagein"
TARGET_RATIO = 0.5


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--memsize", type=int, default=128, help="guest RAM (MiB)")
    p.add_argument("--swap", type=int, default=512, help="swap disk (MiB)")
    p.add_argument("--heap-mib", type=int, default=384, help="pagein's heap (MiB)")
    p.add_argument("--runs", type=int, default=2, help="runs of each in one boot")


def measure(args: argparse.Namespace) -> list[Figure]:
    base = BuildConfig.parse(args.config)
    cfg = BuildConfig(base.lazy, base.cow, memsize=args.memsize, swapsize=args.swap)
    if not args.no_build:
        build(cfg)
    read, pagein = [], []
    with tempfile.TemporaryDirectory(prefix="nexos-bench-") as tmp:
        image = make_image(cfg, Path(tmp), 128)
        with booted(cfg, image=image) as s:
            for _ in range(max(1, args.runs)):
                f = run_line(s, "readbench /big 256", "readbench ", timeout=600)
                read.append(number(f, "mibps", "readbench"))
                cmd = f"pagein {args.heap_mib}"
                f = run_line(s, cmd, "pagein ", timeout=1800)
                if number(f, "swap_ins", cmd) < number(f, "pages", cmd) / 2:
                    raise BenchError(f"`{cmd}` read back only {f.get('swap_ins')} of "
                                     f"{f.get('pages')} pages from swap: was there pressure?")
                pagein.append(number(f, "mibps", cmd))
    note = f"{cfg.name}, {args.memsize} MiB RAM, {args.swap} MiB swap, best of {len(read)}"
    return [Figure(NAME, "file system sequential read", max(read), "MiB/s", note=note),
            Figure(NAME, "sequential page-in from swap", max(pagein), "MiB/s"),
            Figure(NAME, "page-in / read", max(pagein) / max(read), "x", TARGET_RATIO, "ge")]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
