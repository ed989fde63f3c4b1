"""fork_cow: fork() of a process with 128 MiB resident, copy-on-write against the eager copy.

Runs user/forkbench in a COW_ALLOC=1 kernel and in a COW_ALLOC=0 kernel (same LAZY_ALLOC),
several times each, and prints the median fork time of each, the ratio eager/COW
(target ≥ 50×), and whether the COW child's copied pages equal the pages it wrote.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main, median, number, run_line

from nexos.machine.config import BuildConfig

NAME = "fork_cow"
TARGET_RATIO = 50.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cow-config", default="lazy1-cow1", help="the COW_ALLOC=1 configuration")
    p.add_argument("--eager-config", default="lazy1-cow0", help="the COW_ALLOC=0 configuration")
    p.add_argument("--mib", type=int, default=128, help="resident MiB at the fork")
    p.add_argument("--write-pages", type=int, default=64, help="pages the child writes")
    p.add_argument("--runs", type=int, default=3, help="forkbench runs per configuration")


def run_forkbench(cfg: BuildConfig, args: argparse.Namespace) -> list[dict[str, float]]:
    """Boot `cfg` and run forkbench `runs` times; the parsed lines."""
    cmd = f"forkbench {args.mib} {args.write_pages}"
    rows = []
    with booted(cfg) as s:
        for _ in range(max(1, args.runs)):
            f = run_line(s, cmd, "forkbench ", timeout=300)
            rows.append({k: number(f, k, cmd) for k in
                         ("fork_us", "written_pages", "copied_pages", "cow_alloc")})
    if any(int(r["cow_alloc"]) != cfg.cow for r in rows):
        raise BenchError(f"forkbench in {cfg.name} reports cow_alloc={rows[0]['cow_alloc']:.0f}")
    return rows


def measure(args: argparse.Namespace) -> list[Figure]:
    cow, eager = BuildConfig.parse(args.cow_config), BuildConfig.parse(args.eager_config)
    if cow.cow != 1 or eager.cow != 0:
        raise BenchError("--cow-config needs COW_ALLOC=1 and --eager-config COW_ALLOC=0")
    if not args.no_build:
        build(cow)
        build(eager)
    cow_rows, eager_rows = run_forkbench(cow, args), run_forkbench(eager, args)
    cow_us = median([r["fork_us"] for r in cow_rows])
    eager_us = median([r["fork_us"] for r in eager_rows])
    written = cow_rows[-1]["written_pages"]
    copied = [int(r["copied_pages"]) for r in cow_rows]
    same = all(c == int(r["written_pages"]) for c, r in zip(copied, cow_rows))
    note = f"{args.mib} MiB resident, median of {len(cow_rows)}"
    return [
        Figure(NAME, f"fork_us {cow.name}", cow_us, "µs", note=note),
        Figure(NAME, f"fork_us {eager.name}", eager_us, "µs", note=note),
        Figure(NAME, "ratio eager/COW", eager_us / max(cow_us, 1.0), "×", TARGET_RATIO, "ge"),
        Figure(NAME, "COW copied pages", float(copied[-1]), "pages",
               note=f"written {written:.0f}; copied == written in every run: "
                    f"{'yes' if same else 'NO ' + str(copied)}"),
    ]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
