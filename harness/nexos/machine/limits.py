"""The C side's values that the harness needs, read from their one home so that nothing is
copied by hand: the programs' headers (user/smolprobe/smolprobe.h,
user/smolserve/smolserve.h), the kernel's page size (kernel/riscv.h), harts and RAM range
(kernel/param.h) and the Makefile's default guest memory, in the checkout this harness
belongs to (docs/harness.md, "Values from the C side").

A header line `#define NAME 123   // why` (or `(1 << 24)`) gives NAME, a Makefile line `NAME
:= 512` likewise; a name the harness needs that is missing is an error at import, not a
silent default.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[3]
DEFINE_RE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(?:(\d+)\b|\(1\s*<<\s*(\d+)\))", re.M)
MAKE_RE = re.compile(r"^([A-Z][A-Z0-9_]*)\s*:?=\s*(\S+)\s*$", re.M)


class LimitsError(RuntimeError):
    """A header the harness reads is missing, or lacks a value it needs."""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise LimitsError(f"{path}: cannot read ({e.strerror}); the harness reads the C "
                          "side's values from the checkout it is installed from") from None


def _pick(path: Path, found: dict[str, int], names: tuple[str, ...], form: str
          ) -> dict[str, int]:
    missing = [n for n in names if n not in found]
    if missing:
        raise LimitsError(f"{path}: no `{form.format(missing[0])}` line")
    return {n: found[n] for n in names}


def read_defines(header: Path, names: tuple[str, ...]) -> dict[str, int]:
    """The integer `#define`s `names` of `header` (`123` or `(1 << 24)`)."""
    found = {m[1]: int(m[2]) if m[2] else 1 << int(m[3])
             for m in DEFINE_RE.finditer(_read(header))}
    return _pick(header, found, names, "#define {} <integer>")


def make_assignments(text: str) -> dict[str, str]:
    """Every one-word `NAME := value` (or `NAME = value`) line of a Makefile's text, the
    first of each name: what the harness reads from a Makefile, here or in another
    checkout (build.default_model)."""
    found: dict[str, str] = {}
    for m in MAKE_RE.finditer(text):
        found.setdefault(m[1], m[2])
    return found


def read_make_values(makefile: Path, names: tuple[str, ...]) -> dict[str, int]:
    """The integer `NAME := 123` assignments `names` of `makefile`."""
    found = {k: int(v) for k, v in make_assignments(_read(makefile)).items() if v.isdigit()}
    return _pick(makefile, found, names, "{} := <integer>")


_PROBE = read_defines(CHECKOUT / "user" / "smolprobe" / "smolprobe.h",
                      ("DEFAULT_SEQ_LEN", "DEFAULT_TEXT_GEN", "MAX_SAMPLES"))
_SERVE = read_defines(CHECKOUT / "user" / "smolserve" / "smolserve.h",
                      ("MAX_REQ", "MAX_PROMPT"))
_KERNEL = {**read_defines(CHECKOUT / "kernel" / "riscv.h", ("PGSIZE",)),
           **read_defines(CHECKOUT / "kernel" / "param.h", ("NCPU", "MINRAM_MB", "MAXRAM_MB"))}
_MAKE = read_make_values(CHECKOUT / "Makefile", ("DEFAULT_MEMSIZE", "MAX_SWAPSIZE"))

PAGE_SIZE = _KERNEL["PGSIZE"]                    # bytes of a page
MAX_CPUS = _KERNEL["NCPU"]                       # harts the kernel can run (-smp 1..this)
DEFAULT_MEMSIZE = _MAKE["DEFAULT_MEMSIZE"]       # MiB of guest RAM when MEMSIZE is not given
MIN_MEMSIZE = _KERNEL["MINRAM_MB"]              # MEMSIZE (MiB) the kernel boots with: from this
MAX_MEMSIZE = _KERNEL["MAXRAM_MB"]              # ... to this
MAX_SWAPSIZE = _MAKE["MAX_SWAPSIZE"]             # MiB of swap disk at most (SWAPSIZE)
SMOLPROBE_SEQ_LEN = _PROBE["DEFAULT_SEQ_LEN"]   # --seq-len when none is given (capped by the model)
SMOLPROBE_TEXT_GEN = _PROBE["DEFAULT_TEXT_GEN"]  # --gen-len of --prompt/--chat when none is given
SMOLPROBE_MAX_SAMPLES = _PROBE["MAX_SAMPLES"]    # --samples 1..this
SMOLSERVE_MAX_REQUESTS = _SERVE["MAX_REQ"]       # requests in one workload
SMOLSERVE_MAX_PROMPT = _SERVE["MAX_PROMPT"]      # prompt tokens of one request
