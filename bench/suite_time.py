"""suite_time: wall time of the test suite as the README runs it
(`python -m pytest -n 2 -q -ra`: target ≤ 10 min on 2 cores) and of its quick tier
(`-m quick`: every test that boots nothing and the boot smoke test; target ≤ 2 min).

The whole suite takes minutes, so it only runs with --run-suite; the quick tier always
runs. Both print pytest's own closing line and its 15 slowest tests
(`--durations=15`), which docs/testing.md records. A suite that fails still gives a time
(the tests ran); its closing line counts what failed, and the short summary's FAILED and
ERROR lines follow the slowest tests. Nothing here fails on time.

Most of the suite's CPU is QEMU running the real model, and the same commit's suite has
taken from 13 to 25 minutes on the shared machines of different days. So the whole suite
is bracketed by the machine's own speed: one hart of a fresh boot decoding DECODE_TOKENS
tokens, before and after (docs/testing.md, "Where the time goes"). Two suite times are
comparable only beside their yardsticks.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from benchlib import BenchError, Figure, booted, build, main, parse_kv_line, repo

from nexos.machine.config import BuildConfig

NAME = "suite_time"
TARGET_SUITE_S = 10 * 60.0
TARGET_QUICK_S = 2 * 60.0
YARDSTICK_CONFIG = BuildConfig(1, 1)
DECODE_TOKENS = 40
YARDSTICK = f"smolprobe --prompt-tokens 1,2,3 --gen-len {DECODE_TOKENS} --harts 1"
CLOSING_RE = re.compile(r"^=*\s*(\d+ (passed|failed).*) in ([\d.]+)s", re.M)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-suite", action="store_true",
                   help="also run the whole suite (long: minutes, boots QEMU)")
    p.add_argument("--show", action="store_true", help="print pytest's whole output")


def timed_pytest(selection: list[str], show: bool) -> tuple[float, str, str]:
    """(wall seconds, pytest's closing line, its --durations block and the short summary's
    FAILED and ERROR lines) of one pytest run in the checkout, with this interpreter (the
    project's .venv)."""
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "-q", "-ra", "--durations=15",
           "-p", "no:cacheprovider", *selection]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=repo(), capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    if show:
        print(p.stdout, p.stderr)
    closing = CLOSING_RE.search(p.stdout)
    if closing is None:
        raise BenchError(f"pytest {' '.join(selection)} printed no closing line "
                         f"(exit {p.returncode})", (p.stdout + p.stderr)[-2000:])
    durations = p.stdout.split("slowest 15 durations", 1)[-1].split("\n=", 1)[0]
    failures = [ln for ln in p.stdout.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    return seconds, f"{closing[1]} in {closing[3]}s", "\n".join(
        [durations.strip("= \n"), *failures])


def figure(name: str, selection: list[str], target: float, show: bool) -> Figure:
    seconds, closing, durations = timed_pytest(selection, show)
    print(f"{NAME}: {name}: {closing}\n{durations}\n")
    return Figure(NAME, name, seconds, "s", target, "le", closing)


def yardstick(when: str) -> Figure:
    """The machine's speed now: decode tokens/s of one hart (smolprobe's timing line)."""
    with booted(YARDSTICK_CONFIG, llm=True) as s:
        out = s.run(YARDSTICK, timeout=900).output
    rate = float(parse_kv_line(out, "[smolprobe] timing ", YARDSTICK)["decode_tokens_per_s"])
    print(f"{NAME}: {when}: one hart decodes {rate:g} tokens/s")
    return Figure(NAME, f"one-hart decode {when}", rate, "tokens/s")


def measure(args: argparse.Namespace) -> list[Figure]:
    figs = [figure("pytest -m quick", ["-m", "quick"], TARGET_QUICK_S, args.show)]
    if args.run_suite:
        if not args.no_build:
            build(YARDSTICK_CONFIG, llm=True)
        figs.append(yardstick("before the suite"))
        figs.append(figure("pytest (whole suite)", [], TARGET_SUITE_S, args.show))
        figs.append(yardstick("after the suite"))
    else:
        print(f"{NAME}: the whole suite skipped (pass --run-suite; it takes minutes)")
    return figs


if __name__ == "__main__":
    sys.exit(main(NAME, __doc__ or NAME, add_args, measure))
