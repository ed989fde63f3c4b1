"""first_token: time to the first token, the model mapped against read with --no-mmap, cold.

Boots one kernel with the LLM image (`--config`, default lazy1-cow0: LAZY_ALLOC=1
COW_ALLOC=0; the real SmolLM2-135M-Instruct, prepared, as /model.bin) and runs

    smolprobe --chat "What is the capital of France?" --gen-len 1 [--no-mmap]

each in a fresh boot, so the guest's page cache is empty and every weight page comes from
the guest's disk. "Cold" is the guest's: a first, uncounted run brings the image file into
the host's cache, so that neither way alone pays the host's disk. The two ways then
alternate, `--runs` times each. Figures, medians over the runs: smolprobe's own `load_ms`
(start to the KV reservation: opening, mapping or reading the checkpoint, the run state)
and `first_token_ms` (start to the first token's logits: load plus the prompt's prefill),
and the ratio first_token_ms mapped / read against the mapped model's target, at most 1/2
(docs/smolprobe.md, "The weights: mapped or read"). Measures only; never asserts.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main, median

from nexos.machine.config import BuildConfig
from nexos.parse import ParseError, SmolprobeResult, parse_smolprobe

NAME = "first_token"
CMD = 'smolprobe --chat "What is the capital of France?" --gen-len 1'
WAYS = (("mapped", ""), ("read", " --no-mmap"))   # the weights line's source, the flag
TARGET_RATIO = 0.5   # first token mapped <= 1/2 of the read() path, cold, same kernel


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow0", help="configuration to boot")
    p.add_argument("--runs", type=int, default=3, help="cold boots of each way")


def cold_run(cfg: BuildConfig, source: str, cmd: str) -> SmolprobeResult:
    """One run of cmd in a fresh boot; BenchError unless it ran with weights `source`."""
    with booted(cfg, llm=True) as s:
        out = s.run(cmd, timeout=900).output
    try:
        r = parse_smolprobe(out)
    except ParseError as e:
        raise BenchError(f"`{cmd}`: {e.args[0]}", e.text[-1500:]) from None
    if not r.ok or r.timing is None or r.weights is None:
        raise BenchError(f"`{cmd}` failed", out[-1500:])
    if r.weights.source != source:
        raise BenchError(f"`{cmd}`: weights source={r.weights.source}, want {source}",
                         out[-1500:])
    return r


def runs_text(ms: list[float]) -> str:
    """The runs' figures in order: `13774, 14085, 13990 ms`."""
    return ", ".join(str(int(v)) for v in ms) + " ms"


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg, llm=True)
    runs = max(1, args.runs)
    load: dict[str, list[float]] = {way: [] for way, _ in WAYS}
    first: dict[str, list[float]] = {way: [] for way, _ in WAYS}
    cold_run(cfg, "read", CMD + " --no-mmap")     # the host's cache of the image, uncounted
    for _ in range(runs):
        for way, flag in WAYS:
            r = cold_run(cfg, way, CMD + flag)
            assert r.timing is not None
            load[way].append(r.timing.load_ms)
            first[way].append(r.timing.first_token_ms)
    figs: list[Figure] = []
    for way, flag in WAYS:
        note = f"{cfg.name}{flag}, {runs} cold boots"
        prefill = [f - ld for f, ld in zip(first[way], load[way])]
        figs += [Figure(NAME, f"{way}: load_ms", median(load[way]), "ms",
                        note=f"{note}: {runs_text(load[way])}"),
                 Figure(NAME, f"{way}: first_token_ms", median(first[way]), "ms",
                        note=f"{note}: {runs_text(first[way])}"),
                 Figure(NAME, f"{way}: first_token_ms - load_ms", median(prefill), "ms",
                        note=f"{note}: the prompt's prefill and the first logits")]
    ratio = median(first["mapped"]) / max(1.0, median(first["read"]))
    load_ratio = median(load["mapped"]) / max(1.0, median(load["read"]))
    figs += [Figure(NAME, "first token mapped / read", ratio, "×", TARGET_RATIO, "le",
                    f"{cfg.name}, medians of {runs} cold boots each"),
             Figure(NAME, "load mapped / read", load_ratio, "×", note=cfg.name)]
    return figs


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
