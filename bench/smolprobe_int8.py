"""smolprobe_int8: the int8 matvec against the guest's peak int8 multiply-add rate.

Boots a LAZY_ALLOC=1 COW_ALLOC=0 kernel with the LLM image (the default model: the real
SmolLM2-135M-Instruct, Q8_0/Q4_1; `make MODEL=synth` for the int8 synthetic one) and runs
`smolprobe --bench` (docs/smolprobe.md, "--bench"): in one run it
times a tight hand-unrolled int8 x int8 -> int32 loop over a hot buffer (the better of a
plain byte loop and smolprobe's packed two-MACs-per-multiply step: the peak) and smolprobe's
own int8 matvec over real weights (w_gate of layer 0 and the 49152 x 576 classifier),
alternating, best of three each. Prints both rates and their ratio next to the target
in docs/benchmarks.md (matvec >= 70% of peak). Measures only; never asserts.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main, number, parse_kv_line

from nexos.machine.config import BuildConfig

NAME = "smolprobe_int8"
TARGET_RATIO = 70.0  # percent
CMD = "smolprobe --bench"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow0", help="configuration to boot")
    p.add_argument("--runs", type=int, default=1, help="smolprobe --bench runs in one boot")


def figures(out: str, note: str) -> list[Figure]:
    """The figures of one `smolprobe --bench` output."""
    b = parse_kv_line(out, "[smolprobe] bench ", CMD)
    d = parse_kv_line(out, "[smolprobe] bench_detail ", CMD)
    peak = number(b, "peak_int8_macs_per_s", CMD) / 1e6
    mv = number(b, "matvec_int8_macs_per_s", CMD) / 1e6
    ratio = number({"ratio": b.get("ratio", "").rstrip("%")}, "ratio", CMD)
    figs = [
        Figure(NAME, "peak int8 MACs/s", peak, "M/s", note=note),
        Figure(NAME, "matvec int8 MACs/s", mv, "M/s", note=note),
        Figure(NAME, "matvec / peak", ratio, "%", TARGET_RATIO, "ge", note),
    ]
    for key in ("peak_plain", "peak_packed", "w_gate", "classifier"):
        figs.append(Figure(NAME, f"{key} MACs/s", number(d, key, CMD) / 1e6, "M/s", note=note))
    return figs


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg, llm=True)
    figs: list[Figure] = []
    with booted(cfg, llm=True) as s:
        for run in range(max(1, args.runs)):
            out = s.run(CMD, timeout=900).output
            if "[smolprobe] error:" in out:
                raise BenchError(f"`{CMD}` failed", out[-1500:])
            figs += figures(out, f"{cfg.name}, run {run + 1}")
    return figs


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
