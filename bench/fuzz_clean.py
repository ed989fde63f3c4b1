"""fuzz_clean: the system-call fuzzer (docs/fuzz.md) for a long run in each configuration,
without swap and with a swap disk (and the fuzzer's hog), on two harts. Prints, per run,
the system calls a second and whether it was clean, and how many runs were not (target 0;
each one's problem and repro line are printed too). Speed has no target.

    python bench/fuzz_clean.py [--minutes 10] [--configs A,B] [--swap 512] [--seed N]
                               [--procs P] [--cpus 2]
"""

from __future__ import annotations

import argparse
import sys

from benchlib import Figure, build, main, repo

from nexos.machine.config import ALL_CONFIGS, BuildConfig
from nexos.machine.fuzz import DEFAULT_PROCS, DEFAULT_SEED, run_fuzz

NAME = "fuzz_clean"
ALL = ",".join(BuildConfig(lazy, cow).name for lazy, cow in ALL_CONFIGS)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=10.0, help="each run's length")
    p.add_argument("--configs", default=ALL, help="configurations, by commas")
    p.add_argument("--swap", type=int, default=512,
                   help="the swap disk of the second run of each (MiB; 0: no such run)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--procs", type=int, default=DEFAULT_PROCS)
    p.add_argument("--cpus", type=int, default=2, help="harts")


def measure(args: argparse.Namespace) -> list[Figure]:
    seconds = max(1, round(args.minutes * 60))
    figures, unclean = [], []
    for name in [n.strip() for n in args.configs.split(",") if n.strip()]:
        base = BuildConfig.parse(name)
        if not args.no_build:
            build(base)
        for swap in ([0, args.swap] if args.swap else [0]):
            cfg = BuildConfig(base.lazy, base.cow, cpus=args.cpus, swapsize=swap)
            rec = run_fuzz(cfg, repo(), seconds, args.seed, args.procs)
            s = rec.result.summary if rec.result else None
            rate = s.calls / max(s.seconds, 1) if s else 0.0
            label = f"{cfg.name}, swap {swap} MiB"
            figures.append(Figure(NAME, f"{label}: system calls", rate, "/s",
                                  note="clean" if rec.problem is None else "NOT CLEAN"))
            if rec.problem is not None:
                unclean.append(label)
                print(f"{NAME}: {label}: {rec.problem}\n{rec.evidence[-1500:]}\n"
                      f"repro: {rec.repro}", flush=True)
    figures.append(Figure(NAME, "runs not clean", len(unclean), "", 0, "le",
                          note=", ".join(unclean) or f"{seconds} s each, {args.procs} "
                          f"workers, {args.cpus} harts, seed {args.seed}"))
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
