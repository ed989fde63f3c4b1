"""smolserve_capacity: how many requests a KV-cache server runs at once, eager against lazy.

Boots the LLM image in LAZY_ALLOC=0 COW_ALLOC=0 and in LAZY_ALLOC=1 COW_ALLOC=1 (two harts,
512 MiB) and runs the default generated workload, `smolserve --requests 32 --max-len 2048`
(every request reserves 2048 slots; the true lengths are mostly a few tokens, a few up to
16: docs/smolserve.md) over the image's /model.bin. Targets of docs/smolserve.md, all
printed, never asserted:

- the lazy, copy-on-write kernel runs >= 10x as many requests at once (peak_concurrent);
- every request completes in every configuration;
- free pages return to their baseline (memory line: leaked_pages = 0).
"""

from __future__ import annotations

import argparse
import sys

from benchlib import Figure, build, main, serve_run

from nexos.machine.config import BuildConfig
from nexos.records import ServeSummary

NAME = "smolserve_capacity"
TARGET_RATIO = 10.0
CPUS = 2


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=32, help="generated requests")
    p.add_argument("--max-len", type=int, default=2048, help="slots each request reserves")
    p.add_argument("--seed", type=int, default=0, help="the workload's seed")
    p.add_argument("--configs", default="lazy0-cow0,lazy1-cow1",
                   help="configurations, the eager one first")


def serve(cfg: BuildConfig, cmd: str) -> tuple[ServeSummary, int]:
    """Run cmd on cfg: its SERVE_SUMMARY and the pages that did not come back."""
    res = serve_run(cfg, cmd)
    assert res.summary is not None and res.memory is not None
    return res.summary, res.memory.leaked_pages


def measure(args: argparse.Namespace) -> list[Figure]:
    cfgs = [BuildConfig.parse(n, cpus=CPUS) for n in args.configs.split(",")]
    cmd = f"smolserve --requests {args.requests} --max-len {args.max_len} --seed {args.seed}"
    figures: list[Figure] = []
    peaks: list[int] = []
    for cfg in cfgs:
        if not args.no_build:
            build(cfg, llm=True)
        s, leaked = serve(cfg, cmd)
        note = f"{cfg.name}, {CPUS} harts, {cmd}"
        peaks.append(s.peak_concurrent)
        figures += [
            Figure(NAME, "peak concurrent requests", s.peak_concurrent, "requests", note=note),
            Figure(NAME, "requests that waited in the queue", s.queued, "requests", note=note),
            Figure(NAME, "requests completed", s.completed, "requests", s.requests, "ge", note),
            Figure(NAME, "recomputed requests", s.recomputed, "requests", note=note),
            Figure(NAME, "KV pages mapped / reserved", s.mapped_kv_pages,
                   f"of {s.reserved_kv_pages} pages", note=note),
            Figure(NAME, "mapped KV pages holding no row", s.waste_percent, "%", note=note),
            Figure(NAME, "peak memory in use", s.peak_used_pages * 4096 / 2**20, "MiB",
                   note=note),
            Figure(NAME, "throughput", s.tokens_per_s, "tokens/s", note=note),
            Figure(NAME, "free pages not back at the end", leaked, "pages", 0, "le", note),
        ]
    if len(peaks) >= 2 and peaks[0] > 0:
        figures.append(Figure(NAME, "peak concurrency, last over first configuration",
                              peaks[-1] / peaks[0], "×", TARGET_RATIO, "ge",
                              f"{cfgs[-1].name} / {cfgs[0].name}"))
    return figures


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
