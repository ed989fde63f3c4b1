"""Parsers for NexOS console output: boot line, smolprobe lines, test-program verdicts.

Every parser returns typed records. Malformed or missing lines raise ParseError, which carries
the offending text so a report can show the evidence. smolprobe lines are parsed generically
(`key=value` pairs), so a new key never breaks the parser; known keys become typed fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "[smolprobe] "

BOOT_RE = re.compile(
    r"nexos: LAZY_ALLOC=(?P<lazy>\d+) COW_ALLOC=(?P<cow>\d+) cpus=(?P<cpus>\d+) "
    r"mem=(?P<mem>\d+)M")
PANIC_RE = re.compile(r"^panic: .*$", re.M)
USERTRAP_RE = re.compile(r"^usertrap: .*$", re.M)
VERDICT_RE = re.compile(r"^(ALL TESTS PASSED|SOME TESTS FAILED)\s*$", re.M)
KV_RE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>\S*)")

Value = int | float | str | tuple[int, ...]


class ParseError(ValueError):
    """Output that does not have the expected shape. `text` is the offending output."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text

    def __str__(self) -> str:
        return f"{self.args[0]}: {self.text.strip()[-300:]!r}"


# --------------------------------------------------------------------------- boot line

@dataclass(frozen=True)
class BootInfo:
    """The kernel's configuration line: `nexos: LAZY_ALLOC=1 COW_ALLOC=1 cpus=1 mem=512M`."""

    lazy: int
    cow: int
    cpus: int
    mem: int  # MiB
    line: str


def parse_boot_line(text: str) -> BootInfo:
    """The first boot line in `text`; ParseError if there is none."""
    m = BOOT_RE.search(text)
    if not m:
        raise ParseError("no boot line `nexos: LAZY_ALLOC=.. COW_ALLOC=.. cpus=.. mem=..M`", text)
    line_end = text.find("\n", m.start())
    line = text[m.start(): line_end if line_end >= 0 else len(text)].strip()
    return BootInfo(int(m["lazy"]), int(m["cow"]), int(m["cpus"]), int(m["mem"]), line)


# --------------------------------------------------------------------------- faults, verdicts

@dataclass(frozen=True)
class TestVerdict:
    """Outcome of a test program (usertests, lazytests, cowtests ...)."""

    passed: bool
    line: str                  # the verdict line, or the evidence when not passed
    usertraps: tuple[str, ...]  # `usertrap:` lines seen (a test may provoke them on purpose)
    panic: str | None


def find_panic(text: str) -> str | None:
    """The first `panic: ...` line, or None."""
    m = PANIC_RE.search(text)
    return m.group(0).strip() if m else None


def find_usertraps(text: str) -> tuple[str, ...]:
    """Every `usertrap: ...` line."""
    return tuple(m.group(0).strip() for m in USERTRAP_RE.finditer(text))


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


# --------------------------------------------------------------------------- smolprobe records

@dataclass(frozen=True)
class Record:
    """One `[smolprobe] ...` line: leading words, then key=value pairs (typed values)."""

    kind: str                    # first word (`SUMMARY`, `trace`, `branch`, `verdict`, ...)
    words: tuple[str, ...]       # other words without `=` (e.g. the branch index)
    fields: dict[str, Value]
    line: str                    # the whole line without the prefix


def parse_value(raw: str) -> Value:
    """`93%` -> 93, `12` -> 12, `1,2,3` -> (1, 2, 3), `0.5` -> 0.5, else the string."""
    s = raw.rstrip("%") if raw.endswith("%") else raw
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+(,-?\d+)+,?", s) or (raw.endswith(",") and s[:-1].isdigit()):
        return tuple(int(x) for x in s.split(",") if x)
    try:
        return float(s)
    except ValueError:
        return raw


def split_records(text: str) -> list[str]:
    """The bodies of all `[smolprobe] ` lines; a line holding two records is split in two."""
    bodies = []
    for line in text.replace("\r", "").split("\n"):
        at = line.find(PREFIX)
        if at < 0:
            continue
        for part in line[at:].split(PREFIX)[1:]:
            bodies.append(part.strip())
    return bodies


def parse_record(body: str) -> Record:
    """Split one record body into kind, words and typed key=value fields."""
    if body.startswith("error:"):
        return Record("error", (), {"message": body[len("error:"):].strip()}, body)
    fields: dict[str, Value] = {}
    words: list[str] = []
    tokens = body.split()
    kind = ""
    for i, tok in enumerate(tokens):
        m = KV_RE.fullmatch(tok)
        if m:
            if i == 0:
                kind = m["key"]
            fields[m["key"]] = parse_value(m["val"])
        elif i == 0:
            kind = tok
        elif not fields or kind == "verdict":
            words.append(tok)
    return Record(kind, tuple(words), fields, body)


def _int(rec: Record, key: str) -> int:
    """Field `key` of `rec` as an int; ParseError naming the line when absent or not a number."""
    v = rec.fields.get(key)
    if not isinstance(v, int):
        raise ParseError(f"`{rec.kind}` line needs an integer {key}=", PREFIX + rec.line)
    return v


def _opt_int(rec: Record, key: str) -> int | None:
    v = rec.fields.get(key)
    return v if isinstance(v, int) else None


def _tokens(v: Value | None) -> tuple[int, ...]:
    if isinstance(v, tuple):
        return v
    if isinstance(v, int):
        return (v,)
    return ()


@dataclass(frozen=True)
class Request:
    prompt_tokens: int
    gen_tokens: int


@dataclass(frozen=True)
class KvCapacity:
    max_pages: int
    active_pages_est: int


@dataclass(frozen=True)
class Summary:
    max_kv_pages: int
    actual_mapped_pages: int
    saved_pages: int
    saved_percent: int


@dataclass(frozen=True)
class Phase:
    """reserve_phase or decode_phase. virtual_pages only on reserve, active_pages_est on decode."""

    mapped_pages: int
    used_pages: int
    virtual_pages: int | None = None
    active_pages_est: int | None = None


@dataclass(frozen=True)
class TraceStep:
    step: int
    pos: int
    kv_mapped_pages: int


@dataclass(frozen=True)
class ForkPhase:
    branches: int
    shared_pages_at_fork: int | None
    prefix_kv_pages: int | None


@dataclass(frozen=True)
class Branch:
    """One `branch i ...` line of a --samples run; keys beyond the known ones are in `fields`."""

    index: int
    tokens: tuple[int, ...]  # token ids (or a single count) as printed
    cow_copies: int | None
    cow_reuses: int | None
    new_kv_pages: int | None
    fields: dict[str, Value] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ParallelSummary:
    branches: int
    eager_copy_pages: int
    actual_copied_pages: int
    saved_pages: int
    saved_percent: int


@dataclass
class SmolprobeResult:
    """Everything smolprobe printed. `error` is set (and the rest may be None) on an error run."""

    request: Request | None = None
    kv_capacity: KvCapacity | None = None
    summary: Summary | None = None
    reserve: Phase | None = None
    decode: Phase | None = None
    verdict: str | None = None       # LAZY_STYLE | EAGER_STYLE | MIXED
    verdict_text: str = ""           # the explanation after the verdict
    tokens: tuple[int, ...] | None = None
    trace: list[TraceStep] = field(default_factory=list)
    fork: ForkPhase | None = None
    branches: list[Branch] = field(default_factory=list)
    parallel: ParallelSummary | None = None
    parallel_verdict: str | None = None  # COW_STYLE | EAGER_FORK_STYLE
    parallel_verdict_text: str = ""
    fork_failures: list[str] = field(default_factory=list)  # lines saying a fork failed
    error: str | None = None
    records: list[Record] = field(default_factory=list)  # every line, incl. unknown kinds

    @property
    def ok(self) -> bool:
        return self.error is None


VERDICTS = ("LAZY_STYLE", "EAGER_STYLE", "MIXED")
PARALLEL_VERDICTS = ("COW_STYLE", "EAGER_FORK_STYLE")


def _is_fork_failure(rec: Record) -> bool:
    """A line that says a branch's fork failed (COW_ALLOC=0 out of memory), whatever its kind."""
    low = rec.line.lower()
    return "fork" in low and "fail" in low


def _apply(res: SmolprobeResult, rec: Record) -> None:
    """Fill the typed part of `res` that `rec` describes (unknown kinds are only kept raw)."""
    k = rec.kind
    if k == "error":
        res.error = str(rec.fields["message"])
    elif k == "request":
        res.request = Request(_int(rec, "prompt_tokens"), _int(rec, "gen_tokens"))
    elif k == "kv_capacity":
        res.kv_capacity = KvCapacity(_int(rec, "max_pages"), _int(rec, "active_pages_est"))
    elif k == "SUMMARY":
        res.summary = Summary(_int(rec, "max_kv_pages"), _int(rec, "actual_mapped_pages"),
                              _int(rec, "saved_pages"), _int(rec, "saved_percent"))
    elif k == "reserve_phase":
        res.reserve = Phase(_int(rec, "mapped_pages"), _int(rec, "used_pages"),
                            virtual_pages=_int(rec, "virtual_pages"))
    elif k == "decode_phase":
        res.decode = Phase(_int(rec, "mapped_pages"), _int(rec, "used_pages"),
                           active_pages_est=_opt_int(rec, "active_pages_est"))
    elif k == "verdict":
        v = rec.fields.get("verdict")
        text = rec.line.split(None, 1)[1] if " " in rec.line else ""
        if v in PARALLEL_VERDICTS:
            res.parallel_verdict, res.parallel_verdict_text = str(v), text
            return
        if v not in VERDICTS:
            raise ParseError(f"verdict must be one of {', '.join(VERDICTS + PARALLEL_VERDICTS)}",
                             PREFIX + rec.line)
        res.verdict, res.verdict_text = str(v), text
    elif k == "tokens":
        res.tokens = _tokens(rec.fields.get("tokens"))
    elif k == "trace":
        res.trace.append(TraceStep(_int(rec, "step"), _int(rec, "pos"),
                                   _int(rec, "kv_mapped_pages")))
    elif k == "fork_phase":
        res.fork = ForkPhase(_int(rec, "branches"), _opt_int(rec, "shared_pages_at_fork"),
                             _opt_int(rec, "prefix_kv_pages"))
    elif k == "branch" and "tokens" not in rec.fields and _is_fork_failure(rec):
        res.fork_failures.append(rec.line)
    elif k == "branch":
        if not rec.words or not rec.words[0].isdigit():
            raise ParseError("`branch` line needs an index", PREFIX + rec.line)
        known = ("tokens", "cow_copies", "cow_reuses", "new_kv_pages")
        res.branches.append(Branch(int(rec.words[0]), _tokens(rec.fields.get("tokens")),
                                   _opt_int(rec, "cow_copies"), _opt_int(rec, "cow_reuses"),
                                   _opt_int(rec, "new_kv_pages"),
                                   {f: v for f, v in rec.fields.items() if f not in known}))
    elif k == "PARALLEL_SUMMARY":
        res.parallel = ParallelSummary(
            _int(rec, "branches"), _int(rec, "eager_copy_pages"),
            _int(rec, "actual_copied_pages"), _int(rec, "saved_pages"),
            _int(rec, "saved_percent"))
    elif _is_fork_failure(rec):
        res.fork_failures.append(rec.line)


REQUIRED = ("request", "kv_capacity", "summary", "reserve", "decode", "verdict")
REQUIRED_LINES = {"request": "request", "kv_capacity": "kv_capacity", "summary": "SUMMARY",
                  "reserve": "reserve_phase", "decode": "decode_phase", "verdict": "verdict="}


def parse_smolprobe(text: str, require_complete: bool = True) -> SmolprobeResult:
    """Parse a smolprobe run's console output.

    A run that printed `[smolprobe] error: ...` returns a result with `error` set. Otherwise,
    with require_complete, every line of DESIGN.md §5 must be present (ParseError otherwise).
    """
    bodies = split_records(text)
    if not bodies:
        raise ParseError("no [smolprobe] lines in the output", text)
    res = SmolprobeResult()
    for body in bodies:
        rec = parse_record(body)
        res.records.append(rec)
        _apply(res, rec)
    if res.error and "fork" in res.error.lower() and (res.fork or res.branches or res.parallel):
        # a branch that could not fork is a result of a --samples run, not a failed run
        res.fork_failures.append("error: " + res.error)
        res.error = None
    if res.error is None and require_complete:
        missing = [REQUIRED_LINES[n] for n in REQUIRED if getattr(res, n) is None]
        if missing:
            raise ParseError("smolprobe output lacks " + ", ".join(missing), text)
    return res


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
