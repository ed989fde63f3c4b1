"""The kernel's and the test programs' console lines: the boot line, the test verdicts, and
the lines that make a shell command count as failed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexos.parse.core import ParseError, find_panic, find_usertraps

# ` swap=<MiB>M` is optional: a kernel without swap support does not print it (and has none).
BOOT_RE = re.compile(
    r"nexos: LAZY_ALLOC=(?P<lazy>\d+) COW_ALLOC=(?P<cow>\d+) cpus=(?P<cpus>\d+) "
    r"mem=(?P<mem>\d+)M(?: swap=(?P<swap>\d+)M)?")
VERDICT_RE = re.compile(r"^(ALL TESTS PASSED|SOME TESTS FAILED)\s*$", re.M)


# --------------------------------------------------------------------------- boot line

@dataclass(frozen=True)
class BootInfo:
    """The kernel's configuration line: `nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem=512M
    swap=0M`."""

    lazy: int
    cow: int
    cpus: int
    mem: int  # MiB
    line: str
    swap: int = 0  # MiB of swap the kernel found (0: none, or a line without `swap=`)


def parse_boot_line(text: str) -> BootInfo:
    """The first boot line in `text`; ParseError if there is none."""
    m = BOOT_RE.search(text)
    if not m:
        raise ParseError("no boot line `nexos: LAZY_ALLOC=.. COW_ALLOC=.. cpus=.. mem=..M`", text)
    line_end = text.find("\n", m.start())
    line = text[m.start(): line_end if line_end >= 0 else len(text)].strip()
    return BootInfo(int(m["lazy"]), int(m["cow"]), int(m["cpus"]), int(m["mem"]), line,
                    int(m["swap"] or 0))


# --------------------------------------------------------------------------- verdicts

@dataclass(frozen=True)
class TestVerdict:
    """Outcome of a test program (usertests, lazytests, cowtests ...)."""

    passed: bool
    line: str                  # the verdict line, or the evidence when not passed
    usertraps: tuple[str, ...]  # `usertrap:` lines seen (a test may provoke them on purpose)
    panic: str | None


def parse_test_verdict(text: str) -> TestVerdict:
    """The last ALL TESTS PASSED / SOME TESTS FAILED line; a panic always means failed.

    ParseError when the program printed neither verdict (it crashed or was cut short).
    """
    panic = find_panic(text)
    traps = find_usertraps(text)
    verdicts = VERDICT_RE.findall(text)
    if panic:
        return TestVerdict(False, panic, traps, panic)
    if not verdicts:
        raise ParseError("no ALL TESTS PASSED / SOME TESTS FAILED line", text)
    last = verdicts[-1]
    return TestVerdict(last == "ALL TESTS PASSED", last, traps, None)


# --------------------------------------------------------------------------- command problems

PROBLEM_RE = re.compile(
    r"^(?:SOME TESTS FAILED|usertrap: .*|panic: .*|\[smolprobe\] error: .*"
    r"|exec \S+ failed|sh: .*|cd: cannot cd .*)$", re.M)


def find_problems(text: str) -> list[str]:
    """Lines that make a shell command count as failed (`nexos run`): a failed test verdict,
    a user process killed by a fault, a kernel panic, a smolprobe error, or the shell's own
    complaints (no such program, syntax error, cannot open a redirection). The NexOS shell
    has no `$?`, so these lines are the commands' result.

    A test program that ends with ALL TESTS PASSED provokes faults on purpose (bad-address
    tests), so its `usertrap:` lines are expected and not problems."""
    text = text.replace("\r", "")
    verdicts = VERDICT_RE.findall(text)
    passed = bool(verdicts) and verdicts[-1] == "ALL TESTS PASSED"
    found = [m.group(0).strip() for m in PROBLEM_RE.finditer(text)]
    return [p for p in found if not (passed and p.startswith("usertrap: "))]
