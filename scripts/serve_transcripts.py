"""Regenerate tests/transcripts/serve-*.txt: what smolserve really prints (docs/smolserve.md).

    .venv/bin/python scripts/serve_transcripts.py [--out DIR] [--only NAME]

Boots each kernel configuration it needs in QEMU with the LLM image (build first:
`nexos build --lazy L --cow C --llm`, two harts) and runs smolserve at the NexOS shell. Each
file starts with one `# ` header line saying how it was made (configuration, harts, the
command after `$ `); the rest is the console text of that command, carriage returns removed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "harness"))

from nexos.machine.config import DEFAULT_MEMSIZE, BuildConfig  # noqa: E402
from nexos.machine.qemu import QemuSession  # noqa: E402

TRANSCRIPTS = REPO / "tests" / "transcripts"
HEADER = "# scripts/serve_transcripts.py"
CPUS = 2


@dataclass(frozen=True)
class Run:
    """One transcript: `command` on (lazy, cow) after the `setup` shell commands, in a guest
    of `memsize` MiB with a `swapsize` MiB swap disk (0: none)."""

    name: str
    lazy: int
    cow: int
    command: str
    setup: tuple[str, ...] = ()
    memsize: int = DEFAULT_MEMSIZE
    swapsize: int = 0


OVERCOMMIT = "smolserve --requests 6 --max-len 2048 --long-len 1 --overcommit 1 --test-fill 1"

RUNS = (
    Run("serve-seed32-lazy0-cow0", 0, 0, "smolserve --workload seed32"),
    Run("serve-seed32-lazy1-cow1", 1, 1, "smolserve --workload seed32"),
    Run("serve-generated-lazy1-cow0", 1, 0,
        "smolserve --requests 4 --max-len 64 --long-len 4 --seed 1"),
    Run("serve-killed-lazy1-cow1", 1, 1,
        "smolserve --requests 4 --max-len 32 --long-len 4 --test-kill R1"),
    Run("serve-oom-lazy1-cow1", 1, 1,
        "smolserve --requests 6 --max-len 2048 --long-len 1 --test-fill 1"),
    Run("serve-file-lazy0-cow1", 0, 1, "smolserve --workload /w.txt",
        ("echo X 96 5,6,7 gen=2 > /w.txt",)),
    Run("serve-error-flag-lazy1-cow1", 1, 1, "smolserve --requests 0 --max-len 8"),
    Run("serve-eos-lazy1-cow1", 1, 1, "smolserve --workload /e.txt",
        ("echo E 16 1,2 eos > /e.txt",)),
    Run("serve-queue-lazy0-cow0", 0, 0,
        "smolserve --requests 6 --max-len 2048 --long-len 1"),
    Run("serve-error-max-len-lazy1-cow1", 1, 1, "smolserve --requests 2 --max-len 1000000"),
    Run("serve-prefix-lazy1-cow1", 1, 1,
        "smolserve --requests 4 --max-len 64 --long-len 4 --prefix-len 8"),
    Run("serve-prefix-lazy0-cow0", 0, 0,
        "smolserve --requests 3 --max-len 64 --long-len 4 --prefix-len 8"),
    Run("serve-chat-lazy1-cow1", 1, 1, "smolserve --workload /c.txt",
        ("""echo C1 96 '"What is the capital of France?"' gen=4 > /c.txt""",
         """echo C2 96 '"Name a colour."' gen=4 >> /c.txt""",
         "echo T 64 1,2,3:4 gen=1 >> /c.txt")),
    # nexos serve --swap: the same overcommitted workload without swap and with
    Run("serve-overcommit-mem256-lazy1-cow1", 1, 1, OVERCOMMIT, memsize=256),
    Run("serve-overcommit-swap512-mem256-lazy1-cow1", 1, 1, OVERCOMMIT, memsize=256,
        swapsize=512),
)


def capture(run: Run, out: Path) -> Path:
    """Boot run's configuration, run its setup and command, write the transcript."""
    cfg = BuildConfig(run.lazy, run.cow, run.memsize, CPUS, swapsize=run.swapsize)
    with QemuSession.for_config(cfg, REPO, llm=True) as s:
        for cmd in run.setup:
            s.run(cmd, timeout=60)
        res = s.run(run.command, timeout=900)
    path = out / f"{run.name}.txt"
    setup = "".join(f"$ {c}; " for c in run.setup)
    swap = f" swap={run.swapsize}M" if run.swapsize else ""
    path.write_text(f"{HEADER} guest {cfg.name} cpus={CPUS}{swap} default /model.bin: "
                    f"{setup}$ {run.command}\n{res.output}", encoding="utf-8")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=TRANSCRIPTS)
    ap.add_argument("--only", action="append", default=[], help="a transcript name")
    a = ap.parse_args()
    runs = [r for r in RUNS if not a.only or r.name in a.only]
    if not runs:
        ap.error(f"no such transcript: {', '.join(a.only)}")
    a.out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        print(f"wrote {capture(run, a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
