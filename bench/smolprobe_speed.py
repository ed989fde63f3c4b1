"""smolprobe_speed: the default smolprobe run, timed inside the guest.

Runs `smolprobe --prompt-tokens 1,2,3 --gen-len 10` in a LAZY_ALLOC=1 COW_ALLOC=0 kernel
with the LLM image (the int8 synthetic SmolLM-135M checkpoint) and prints smolprobe's own
`[smolprobe] timing load_ms=.. decode_ms=.. tokens_per_s=..` figures against the targets:
load + decode ≤ 10 s, decode ≥ 2 tokens/s.

The int8 matvec against the guest's peak rate is bench/smolprobe_int8.py.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main

from nexos.machine.config import BuildConfig
from nexos.parse import ParseError, Record, SmolprobeResult, parse_smolprobe

NAME = "smolprobe_speed"
TARGET_TOTAL_S = 10.0
TARGET_TPS = 2.0
DEFAULT_CMD = "smolprobe --prompt-tokens 1,2,3 --gen-len 10"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow0", help="configuration to boot")
    p.add_argument("--runs", type=int, default=1, help="smolprobe runs in one boot")


def timing_record(res: SmolprobeResult, output: str) -> Record:
    for rec in res.records:
        if rec.kind == "timing":
            return rec
    raise BenchError("smolprobe printed no `[smolprobe] timing ...` line", output[-1500:])


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg, llm=True)  # the first time also generates the synthetic model (~10 s)
    cmd = DEFAULT_CMD
    figs: list[Figure] = []
    with booted(cfg, llm=True) as s:
        for run in range(max(1, args.runs)):
            out = s.run(cmd, timeout=900).output
            try:
                res = parse_smolprobe(out)
            except ParseError as e:
                raise BenchError(f"`{cmd}`: {e.args[0]}", e.text[-1500:]) from None
            if res.error:
                raise BenchError(f"`{cmd}`: smolprobe error: {res.error}", out[-1500:])
            t = timing_record(res, out).fields
            try:
                load_ms, decode_ms = float(t["load_ms"]), float(t["decode_ms"])
                tps = float(t["tokens_per_s"])
            except (KeyError, TypeError, ValueError):
                raise BenchError("cannot read the timing line", out[-1500:]) from None
            note = f"{cfg.name}, run {run + 1}"
            figs += [
                Figure(NAME, "load_ms", load_ms, "ms", note=note),
                Figure(NAME, "decode_ms", decode_ms, "ms", note=note),
                Figure(NAME, "load+decode", (load_ms + decode_ms) / 1000, "s",
                       TARGET_TOTAL_S, "le", note),
                Figure(NAME, "tokens/s", tps, "tok/s", TARGET_TPS, "ge", note),
            ]
    return figs


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
