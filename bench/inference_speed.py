"""inference_speed: the model at the emulator's limit, every figure of one run.

Boots the lazy kernel (`--config`, default lazy1-cow0, the configuration of `nexos chat`)
with the LLM image (the real SmolLM2-135M-Instruct) on two harts, and in that one boot,
`--runs` times each, alternating the ways so that the host's load falls on both:

- decode at 1 and 2 harts: `smolprobe --prompt-tokens 1,2,3 --gen-len 40 --harts N`, the
  timing line's decode_tokens_per_s, and their ratio (target ≥ 1.7);
- the prefill per token in blocks against one position at a time: a 48-token prompt with
  `--gen-len 1 --harts 1`, `--prefill-block 16` (the default) against `--prefill-block 1`,
  prefill_tokens_per_s and their ratio; and the default run's prefill rate over its decode
  rate, both on 2 harts (target ≥ 2);
- chat from command to answer: `smolprobe --chat "What is the capital of France?"`, the
  host's wall time from sending the command to the shell's next prompt, and whether the
  answer names Paris: without the prompt cache (`--prompt-cache none`), the boot's first
  chat at its defaults (it saves /chat.kv), and the later ones, which reuse it (target
  ≤ 3 s);
- the load, warm: with another smolprobe holding the model mapped in the background (the
  page cache keeps a file's pages while a process maps them, docs/memory.md), a mapped
  load against a read() load (`--no-mmap`) in the same state (target ≤ 0.05).

Then two fresh boots for the cold load: a mapped load first in one, a read() load first in
the other (target: mapped / read ≤ 1). Figures are medians; measures only, never asserts.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchlib import BenchError, Figure, booted, build, load_note, main, median

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import ParseError, SmolprobeResult, parse_smolprobe

NAME = "inference_speed"
DECODE = "smolprobe --prompt-tokens 1,2,3 --gen-len 40"
PROMPT48 = ",".join(str(100 + 37 * i) for i in range(48))
PREFILL = f"smolprobe --prompt-tokens {PROMPT48} --gen-len 1 --harts 1"
CHAT = 'smolprobe --chat "What is the capital of France?"'
LOAD = "smolprobe --prompt-tokens 1,2,3 --gen-len 1 --harts 1"
HOLDER = "smolprobe --prompt-tokens 1,2,3 --gen-len 200 --harts 1 > /holder.out &"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="lazy1-cow0", help="configuration to boot")
    p.add_argument("--runs", type=int, default=3, help="runs of each way")


def probe(s: QemuSession, cmd: str) -> tuple[SmolprobeResult, float]:
    """Run cmd; its parsed result and the host's seconds until the shell's next prompt."""
    t = time.monotonic()
    out = s.run(cmd, timeout=900).output
    seconds = time.monotonic() - t
    try:
        r = parse_smolprobe(out)
    except ParseError as e:
        raise BenchError(f"`{cmd}`: {e.args[0]}", e.text[-1500:]) from None
    if not r.ok or r.timing is None:
        raise BenchError(f"`{cmd}` failed", out[-1500:])
    return r, seconds


def runs_text(xs: list[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)


def cold_load(cfg: BuildConfig, flag: str) -> float:
    """load_ms of the first smolprobe of a fresh boot (flag: "" mapped, " --no-mmap")."""
    with booted(cfg, llm=True) as s:
        r, _ = probe(s, LOAD + flag)
    assert r.timing is not None
    return r.timing.load_ms


def measure(args: argparse.Namespace) -> list[Figure]:
    cfg = BuildConfig.parse(args.config, cpus=2)
    if not args.no_build:
        build(cfg, llm=True)
    runs = max(1, args.runs)
    decode: dict[int, list[float]] = {1: [], 2: []}
    prefill: dict[int, list[float]] = {1: [], 16: []}
    ratio2: list[float] = []
    chat: dict[str, list[float]] = {"none": [], "saves": [], "reuses": []}
    paris = 0
    warm: dict[str, list[float]] = {"mapped": [], "read": []}
    with booted(cfg, llm=True) as s:
        if s.boot is None or s.boot.cpus != 2:
            raise BenchError("the kernel did not boot two harts")
        for _ in range(runs):
            for n in (1, 2):
                r, _ = probe(s, f"{DECODE} --harts {n}")
                assert r.timing is not None
                decode[n].append(r.timing.decode_tokens_per_s)
                if n == 2:
                    ratio2.append(r.timing.prefill_tokens_per_s
                                  / max(0.1, r.timing.decode_tokens_per_s))
            for block in (1, 16):
                r, _ = probe(s, f"{PREFILL} --prefill-block {block}")
                assert r.timing is not None
                prefill[block].append(r.timing.prefill_tokens_per_s)
            for opts in (" --prompt-cache none", ""):
                r, seconds = probe(s, CHAT + opts)
                kind = "none" if opts else "saves" if not chat["saves"] else "reuses"
                chat[kind].append(seconds)
                paris += "Paris" in (r.text or "")
        s.run(HOLDER)
        time.sleep(2)   # the holder has mapped the model
        for _ in range(runs):
            for way, flag in (("mapped", ""), ("read", " --no-mmap")):
                r, _ = probe(s, LOAD + flag)
                assert r.timing is not None
                warm[way].append(r.timing.load_ms)
    cold = {way: cold_load(cfg, flag) for way, flag in (("mapped", ""), ("read", " --no-mmap"))}
    note = f"{cfg.name} cpus=2, {runs} runs each; {load_note()}"
    d1, d2, p1, p16 = median(decode[1]), median(decode[2]), median(prefill[1]), median(prefill[16])
    wm, wr = median(warm["mapped"]), median(warm["read"])
    return [
        Figure(NAME, "decode, 1 hart", d1, "tokens/s", note=runs_text(decode[1])),
        Figure(NAME, "decode, 2 harts", d2, "tokens/s", note=runs_text(decode[2])),
        Figure(NAME, "decode 2 harts / 1 hart", d2 / max(0.1, d1), "×", 1.7, "ge", note),
        Figure(NAME, "prefill, one position at a time (1 hart)", p1, "tokens/s",
               note=runs_text(prefill[1])),
        Figure(NAME, "prefill, blocks of 16 (1 hart)", p16, "tokens/s",
               note=runs_text(prefill[16])),
        Figure(NAME, "prefill blocks / one at a time", p16 / max(0.1, p1), "×", note=note),
        Figure(NAME, "prefill rate / decode rate (2 harts)", median(ratio2), "×", 2.0, "ge",
               runs_text([round(x, 2) for x in ratio2])),
        Figure(NAME, "chat without the prompt cache, command to prompt", median(chat["none"]),
               "s", note=runs_text([round(x, 2) for x in chat["none"]])),
        Figure(NAME, "chat, the boot's first (saves /chat.kv)", chat["saves"][0], "s"),
        Figure(NAME, "chat, reusing the prompt cache", median(chat["reuses"] or [0.0]), "s",
               3.0, "le", f"names Paris in {paris} of {2 * runs} chats: "
               f"{runs_text([round(x, 2) for x in chat['reuses']])}"),
        Figure(NAME, "load warm: mapped", wm, "ms", note=runs_text(warm["mapped"])),
        Figure(NAME, "load warm: read()", wr, "ms", note=runs_text(warm["read"])),
        Figure(NAME, "load warm: mapped / read()", wm / max(1.0, wr), "×", 0.05, "le",
               "another smolprobe holds the model mapped"),
        Figure(NAME, "load cold: mapped / read()", cold["mapped"] / max(1.0, cold["read"]),
               "×", 1.0, "le", f"first run of a fresh boot: mapped {cold['mapped']:g} ms, "
               f"read {cold['read']:g} ms"),
    ]


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
