"""smolserve_prefix: requests that share a prompt prefix, prefilled once and shared by fork.

Boots the LLM image in LAZY_ALLOC=1 COW_ALLOC=1 (two harts, 512 MiB) and serves the same
generated workload twice, `smolserve --requests 32 --max-len 128 --prefix-len 64` (every
prompt begins with the same 64 tokens, then 1-4 of its own; docs/smolserve.md "Shared
prefixes"): with the prefix shared, and with `--share-prefix 0` (every request prefilled
alone). Targets of the shared-prefix work, printed, never asserted:

- prefill tokens computed with sharing <= 1/8 of without (PREFIX_SUMMARY prefill_tokens);
- KV pages mapped with sharing <= 1/2 of without (the workers' own, SERVE_SUMMARY
  mapped_kv_pages, plus the prefix's, PREFIX_SUMMARY prefix_kv_pages);
- every answer (greedy) the same as without sharing (the request lines' answer_fnv).
"""

from __future__ import annotations

import argparse
import sys

from benchlib import Figure, build, main, serve_run

from nexos.machine.config import BuildConfig
from nexos.records import ServeResult

NAME = "smolserve_prefix"
CPUS = 2


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=32, help="generated requests")
    p.add_argument("--max-len", type=int, default=128, help="slots each request reserves")
    p.add_argument("--prefix-len", type=int, default=64, help="tokens of the shared prefix")
    p.add_argument("--config", default="lazy1-cow1", help="the kernel configuration")


def serve(cfg: BuildConfig, cmd: str) -> tuple[ServeResult, float]:
    """Run cmd on a fresh boot of cfg: the parsed run, and the seconds from its baseline to
    its last answer (the guest's clock)."""
    res = serve_run(cfg, cmd)
    finish = max((e.t_ms for e in res.events if e.kind == "finish"), default=0)
    return res, finish / 1000


def kv_pages(res: ServeResult) -> int:
    """KV pages the run mapped: the workers' own and the prefixes'."""
    assert res.summary is not None and res.prefix_summary is not None
    return res.summary.mapped_kv_pages + res.prefix_summary.prefix_kv_pages


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config, cpus=CPUS)
    if not args.no_build:
        build(cfg, llm=True)
    cmd = (f"smolserve --requests {args.requests} --max-len {args.max_len} "
           f"--prefix-len {args.prefix_len}")
    shared, shared_s = serve(cfg, cmd)
    alone, alone_s = serve(cfg, cmd + " --share-prefix 0")
    ps, pa = shared.prefix_summary, alone.prefix_summary
    assert ps is not None and pa is not None and shared.memory is not None
    same = sum(a.answer_fnv == b.answer_fnv and a.generated == b.generated
               for a, b in zip(shared.requests, alone.requests))
    note = f"{cfg.name}, {CPUS} harts, {cmd}"
    return [
        Figure(NAME, "prefill tokens, shared", ps.prefill_tokens, "tokens", note=note),
        Figure(NAME, "prefill tokens, alone", pa.prefill_tokens, "tokens", note=note),
        Figure(NAME, "prefill tokens, shared / alone", ps.prefill_tokens / pa.prefill_tokens,
               "×", 1 / 8, "le", note),
        Figure(NAME, "KV pages mapped, shared", kv_pages(shared), "pages", note=note),
        Figure(NAME, "KV pages mapped, alone", kv_pages(alone), "pages", note=note),
        Figure(NAME, "KV pages mapped, shared / alone", kv_pages(shared) / kv_pages(alone),
               "×", 0.5, "le", note),
        Figure(NAME, "prefix KV pages copied by the workers", ps.copied_kv_pages, "pages",
               note=note),
        Figure(NAME, "answers equal to those without sharing", same, "requests",
               len(alone.requests), "ge", note),
        Figure(NAME, "time to the last answer, shared", shared_s, "s", note=note),
        Figure(NAME, "time to the last answer, alone", alone_s, "s", note=note),
        Figure(NAME, "free pages not back at the end (shared)", shared.memory.leaked_pages,
               "pages", 0, "le", note),
    ]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
