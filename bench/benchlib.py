"""Shared plumbing for the NexOS benchmarks in bench/.

A benchmark measures and prints figures; it never passes or fails on time. Each script
defines `add_args(parser)` and `measure(args) -> list[Figure]`, and calls `main()` below, so
that `python bench/<name>.py` runs it alone and bench/run_all.py runs them all in-process.
Exit status: 0 when the figures were measured (whatever they are), 1 when something broke
(a build failed, the kernel panicked, a program's output could not be parsed).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    from nexos.machine.build import BuildError, build_one
    from nexos.machine.config import BuildConfig, ConfigError, find_repo
    from nexos.machine.qemu import QemuError, QemuSession
    from nexos.parse import ParseError, parse_serve
    from nexos.records import ServeResult
except ModuleNotFoundError as missing:  # e.g. the system python3, which has no packages
    sys.exit(f"bench: {sys.executable} cannot import {missing.name}: run the benchmarks with "
             "the project's interpreter, .venv/bin/python (made by: bash scripts/setup.sh)")

BENCH_DIR = Path(__file__).resolve().parent
MAKE_JOBS = 2  # the machine has two cores, shared with others


class BenchError(RuntimeError):
    """Something broke while measuring (not a slow figure). `evidence` is console text."""

    def __init__(self, message: str, evidence: str = "") -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass(frozen=True)
class Figure:
    """One measured figure and the target it is read against.

    `better` says which side of `target` is good: "le" (at most) or "ge" (at least);
    None for a figure without a target (printed for information)."""

    bench: str
    name: str
    value: float
    unit: str
    target: float | None = None
    better: str | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether the figure is on the good side of its target (None: no target)."""
        if self.target is None or self.better is None:
            return None
        return self.value <= self.target if self.better == "le" else self.value >= self.target

    @property
    def target_text(self) -> str:
        if self.target is None or self.better is None:
            return ""
        sign = "≤" if self.better == "le" else "≥"
        return f"{sign} {fmt(self.target)}{unit_sep(self.unit)}{self.unit}"

    def line(self) -> str:
        """`bench: name 0.84 s (target ≤ 1.5 s) note`."""
        text = f"{self.bench}: {self.name} {fmt(self.value)}{unit_sep(self.unit)}{self.unit}"
        if self.target_text:
            text += f" (target {self.target_text})"
        if self.note:
            text += f"  [{self.note}]"
        return text


def unit_sep(unit: str) -> str:
    return "" if unit in ("", "×", "%") else " "


def fmt(v: float) -> str:
    """A figure with sensible precision: 0.843, 12.4, 1234."""
    if v == int(v) and abs(v) >= 100:
        return str(int(v))
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# --------------------------------------------------------------------------- repo and builds

def repo() -> Path:
    """The checkout this bench/ folder belongs to (or $NEXOS_REPO)."""
    return find_repo(BENCH_DIR)


def build(config: BuildConfig, llm: bool = False) -> float:
    """make (-j2) one configuration (plus the LLM image when llm); the seconds it took.
    An up-to-date build is a quick no-op. BenchError with the compiler's errors on failure."""
    res = build_one(repo(), config, llm=llm, extra=(f"-j{MAKE_JOBS}",))
    if not res.ok:
        raise BenchError(f"make failed for {config.name}", res.excerpt)
    return res.seconds


@contextmanager
def booted(config: BuildConfig, llm: bool = False, image: Path | None = None,
           boot_timeout: float = 120.0) -> Iterator[QemuSession]:
    """A booted session of `config` (its fs.img, fs-llm.img, or `image`); QEMU is killed on
    leaving the block, whatever happens inside."""
    if image is None:
        session = QemuSession.for_config(config, repo(), llm=llm, boot_timeout=boot_timeout)
    else:
        session = QemuSession(config.build_dir(repo()) / "kernel", image, config,
                              boot_timeout=boot_timeout)
    with session as s:
        yield s


def run_line(session: QemuSession, cmd: str, prefix: str, timeout: float) -> dict[str, str]:
    """Run `cmd` in the guest and return the key=value pairs of its output line that starts
    with `prefix` (e.g. `readbench `). BenchError with the output when there is none."""
    out = session.run(cmd, timeout=timeout).output
    return parse_kv_line(out, prefix, cmd)


def serve_run(config: BuildConfig, cmd: str) -> ServeResult:
    """Run the smolserve command `cmd` on a fresh boot of `config` (its LLM image) and
    parse it. BenchError with the output when it cannot be parsed or ended in an error."""
    with booted(config, llm=True) as s:
        out = s.run(cmd, timeout=3600).output
    try:
        res = parse_serve(out)
    except ParseError as e:
        raise BenchError(f"`{cmd}` on {config.name}: {e}", out[-1500:]) from None
    if res.error or res.summary is None or res.memory is None:
        raise BenchError(f"`{cmd}` on {config.name}: {res.error}", out[-1500:])
    return res


KV_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")


def parse_kv_line(text: str, prefix: str, what: str) -> dict[str, str]:
    """key=value pairs of the last line of `text` starting with `prefix`."""
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    if not lines:
        raise BenchError(f"`{what}` printed no `{prefix.strip()} ...` line", text[-1500:])
    return dict(KV_RE.findall(lines[-1]))


def number(fields: dict[str, str], key: str, what: str) -> float:
    """fields[key] as a number, or BenchError naming the line."""
    try:
        return float(fields[key])
    except (KeyError, ValueError):
        raise BenchError(f"{what}: no numeric {key}= in {fields}") from None


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-build", action="store_true",
                   help="do not run make first (use the builds already in build/)")


# --------------------------------------------------------------------------- running

Measure = Callable[[argparse.Namespace], list[Figure]]


def make_parser(description: str, add_args: Callable[[argparse.ArgumentParser], None]
                ) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    add_common_args(p)
    add_args(p)
    return p


def load_note() -> str:
    """The host's load average, for reading wall-clock figures on a shared machine."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "host load average unknown"
    return (f"host load average {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} "
            "cores: wall-clock figures grow with it")


def failure_text(e: BaseException) -> str | None:
    """One line (plus evidence) for a breakage we expect to report; None for a real bug."""
    if isinstance(e, (BenchError, QemuError, BuildError)):
        ev = getattr(e, "evidence", "") or getattr(e, "excerpt", "")
        return f"{e}" + (f"\n--- evidence ---\n{ev.strip()[-1500:]}" if ev else "")
    if isinstance(e, (ConfigError, OSError)):
        return str(e)
    return None


def main(name: str, description: str, add_args: Callable[[argparse.ArgumentParser], None],
         measure: Measure, argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print one line per figure; 0, or 1 if something broke."""
    args = make_parser(description, add_args).parse_args(argv)
    try:
        figures = measure(args)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 (reported below; a real bug re-raises)
        text = failure_text(e)
        if text is None:
            raise
        print(f"{name}: broken: {text}", file=sys.stderr)
        return 1
    for f in figures:
        print(f.line())
    print(f"({load_note()})")
    return 0
