"""cow_parallel: parallel sampling by fork, physical pages against pages written.

Boots the LLM image in a COW kernel (LAZY_ALLOC=1 COW_ALLOC=1) and runs
`smolprobe --prompt-tokens 1,2,3 --gen-len G --samples N` (default N=4, G=4). The branches
share everything they inherited; each page a branch writes for the first time is either
copied (cow_copies), taken over by its last owner (cow_reuses) or a fresh KV page
(new_kv_pages). The targets of docs/benchmarks.md, both printed:

- physical pages the branches use <= 1.05 x the pages they wrote. Two figures: data pages
  only (`private_pages` of the branches_phase line: copies + fresh pages), and every page
  (`used_pages`: also each branch's own page-table pages, which fork never shares);
- the copies are >= 95% fewer than an eager fork would make (PARALLEL_SUMMARY saved_percent).
Measures only; never asserts.
"""

from __future__ import annotations

import argparse
import sys

from benchlib import BenchError, Figure, booted, build, main, number, parse_kv_line

from nexos.machine.config import BuildConfig

NAME = "cow_parallel"
TARGET_USED_RATIO = 1.05
TARGET_SAVED_PERCENT = 95.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow1", help="configuration to boot")
    p.add_argument("--samples", type=int, default=4, help="branches (smolprobe --samples)")
    p.add_argument("--gen-len", type=int, default=4, help="tokens each branch generates")


def written_pages(out: str, branches: int, cmd: str) -> float:
    """Pages the branches wrote for the first time, summed over the branch lines."""
    total = 0.0
    for i in range(branches):
        b = parse_kv_line(out, f"[smolprobe] branch {i} ", cmd)
        total += sum(number(b, k, cmd) for k in ("cow_copies", "cow_reuses", "new_kv_pages"))
    return total


def figures(out: str, branches: int, cmd: str, note: str) -> list[Figure]:
    written = written_pages(out, branches, cmd)
    phase = parse_kv_line(out, "[smolprobe] branches_phase ", cmd)
    summary = parse_kv_line(out, "[smolprobe] PARALLEL_SUMMARY ", cmd)
    private = number(phase, "private_pages", cmd)
    used = number(phase, "used_pages", cmd)
    saved = number({"p": summary.get("saved_percent", "").rstrip("%")}, "p", cmd)
    return [
        Figure(NAME, "pages written by the branches", written, "pages", note=note),
        Figure(NAME, "data pages used / written", private / written, "×",
               TARGET_USED_RATIO, "le", note),
        Figure(NAME, "all pages used / written (with page tables)", used / written, "×",
               TARGET_USED_RATIO, "le", note),
        Figure(NAME, "copies saved against an eager fork", saved, "%",
               TARGET_SAVED_PERCENT, "ge", note),
    ]


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config)
    if not args.no_build:
        build(cfg, llm=True)
    cmd = f"smolprobe --prompt-tokens 1,2,3 --gen-len {args.gen_len} --samples {args.samples}"
    with booted(cfg, llm=True) as s:
        out = s.run(cmd, timeout=900).output
    if "[smolprobe] error:" in out or "COW_STYLE" not in out:
        raise BenchError(f"`{cmd}` did not run its branches copy-on-write", out[-1500:])
    return figures(out, args.samples, cmd, f"{cfg.name}, N={args.samples}")


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
