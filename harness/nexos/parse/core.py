"""The one parser of the user programs' output lines, driven by a program's schema.

A program (smolprobe, smolserve) prints lines `[<program>] <body>`. Its schema (a `Schema`,
declared in that program's module as the table of its docs/<program>.md, "Output") gives
every line kind: its keys in order and their value types, or a fixed text; and for each run
mode the kinds it prints, in order, and how many of each. This module holds a run to that:

    split_records   the bodies of the program's lines in console text (kernel lines out)
    parse_record    one body -> Record, checked against its kind's keys and types
    check_run       the records in their mode's order; an error run is a cut-short start
    read_run        all three on one run's output

Every problem is a ParseError that names the line and the docs section. The faults of the
kernel (`panic:`, `usertrap:`) are found here too, for every program and test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field


class ParseError(ValueError):
    """Output that does not have the expected shape. `text` is the offending output: the
    line itself for a line that breaks its kind's schema, else the run's output."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text

    def __str__(self) -> str:
        return f"{self.args[0]}: {self.text.strip()[-300:]!r}"


# --------------------------------------------------------------------------- kernel faults

PANIC_RE = re.compile(r"^panic: .*$", re.M)
USERTRAP_RE = re.compile(r"^usertrap: .*$", re.M)
# The kernel's line for a process killed by a fault (kernel/trap.c) or for memory by the OOM
# killer or in a system call's copy (kernel/oom.c); on the console it may land inside a
# program's line (the two write to the same UART), so it is taken out before the lines are
# split.
KILLED_LINE_RE = re.compile(r"usertrap: pid [0-9]+ \([^)\n]*\) killed: (?:scause \S+ sepc \S+ "
                            r"stval \S+|out of memory, the largest \(pid [0-9]+ faulted\)"
                            r"|out of memory in a system call \(va \S+\))\n")


def find_panic(text: str) -> str | None:
    """The first `panic: ...` line, or None."""
    m = PANIC_RE.search(text)
    return m.group(0).strip() if m else None


def find_usertraps(text: str) -> tuple[str, ...]:
    """Every `usertrap: ...` line."""
    return tuple(m.group(0).strip() for m in USERTRAP_RE.finditer(text))


# --------------------------------------------------------------------------- value types

Value = int | float | str | tuple[int, ...] | tuple[float, ...]

# The value types of the schemas. A tuple of words instead of a type: one of those words.
INT, PERCENT, DECIMAL, TENTHS = "int", "percent", "decimal", "tenths"
WORD, NAME, ID, INTS, FLOATS = "word", "name", "id", "ints", "floats"
Type = str | tuple[str, ...]

INT_RE = re.compile(r"-?\d+")
TYPED_RE = {
    INT: INT_RE,
    PERCENT: re.compile(r"-?\d+%"),
    DECIMAL: re.compile(r"-?\d+(\.\d+)?"),
    TENTHS: re.compile(r"[0-9]+\.[0-9]"),     # smolserve's tokens_per_s, truncated
    WORD: re.compile(r"[A-Z_]+"),
    NAME: re.compile(r"[a-z0-9_]+(\+[a-z0-9_]+)*"),  # weight types joined by +: q8_0+q4_1
    ID: re.compile(r"[A-Za-z0-9_\-./]+"),     # a request id or a workload's name
    INTS: re.compile(r"(-?\d+(,-?\d+)*)?"),
    FLOATS: re.compile(r"((-?\d+\.\d+|nan|-?inf)(,(-?\d+\.\d+|nan|-?inf))*)?"),
}
TYPE_NAMES = {INT: "an integer", PERCENT: "an integer percentage", DECIMAL: "a number",
              TENTHS: "a number with one decimal", WORD: "a word", NAME:
              "weight type names joined by +", ID: "an id", INTS: "a list of integers",
              FLOATS: "a list of numbers"}


def parse_value(raw: str) -> Value:
    """`93%` -> 93, `12` -> 12, `1,2,3` -> (1, 2, 3), `0.5` -> 0.5, else the string
    (a value read without its schema)."""
    s = raw[:-1] if raw.endswith("%") else raw
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+(,-?\d+)+", s):
        return tuple(int(x) for x in s.split(","))
    try:
        return float(s)
    except ValueError:
        return raw


def typed(kind: str, key: str, typ: Type, raw: str, line: str) -> Value:
    """`raw`, the value of `key` on a `kind` line, as its schema type; ParseError naming
    the key when it is not of that type."""
    if isinstance(typ, tuple):
        if raw not in typ:
            raise ParseError(f"`{kind}` line: {key} must be one of {', '.join(typ)}, "
                             f"not {raw!r}", line)
        return raw
    if not TYPED_RE[typ].fullmatch(raw):
        raise ParseError(f"`{kind}` line: {key}={raw!r} is not {TYPE_NAMES[typ]}", line)
    if typ == INT:
        return int(raw)
    if typ == PERCENT:
        return int(raw[:-1])
    if typ in (DECIMAL, TENTHS):
        return float(raw)
    if typ == INTS:
        return tuple(int(x) for x in raw.split(",")) if raw else ()
    if typ == FLOATS:
        return tuple(float(x) for x in raw.split(",")) if raw else ()
    return raw


# --------------------------------------------------------------------------- the schema

MANY = 1 << 30
Step = tuple[tuple[str, ...], int, int]  # line kinds allowed here, least and most lines
Keys = dict[str, tuple[tuple[str, Type], ...]]  # kind -> its (key, type) pairs, in order
Modes = dict[str, tuple[Step, ...]]             # run mode -> its steps, in order

# The fixed lines every program prints the same way.
LOADING = re.compile(r"loading LLM assets\.\.\.")
ERROR = re.compile(r"error: (?P<message>.*)")  # always a run's last line


@dataclass(frozen=True)
class Schema:
    """One program's output (docs/<program>.md, "Output") as data.

    keys: each key=value kind's keys, in order, with their types. fixed: the kinds of fixed
    text, their groups the record's fields. modes: each run mode's steps. The rest are the
    few shapes of line beyond `kind k=v k=v`: `bare` kinds print `kind=value` with no kind
    word before it; `explained` ones end in free text after their keys (field `text`);
    `words` gives how many numbers stand between the kind and its keys (a branch's index);
    `trailers` the fixed text after a kind's keys."""

    program: str
    keys: Keys
    fixed: dict[str, re.Pattern[str]]
    modes: Modes
    trailers: dict[str, str] = field(default_factory=dict)
    bare: frozenset[str] = frozenset()
    explained: frozenset[str] = frozenset()
    words: dict[str, int] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return f"[{self.program}] "

    @property
    def doc(self) -> str:
        return f"docs/{self.program}.md, \"Output\""


@dataclass(frozen=True)
class Record:
    """One `[<program>] ...` line: its kind, words before the pairs (a branch's index),
    the typed key=value fields (or a fixed line's parts), and the line without the prefix."""

    kind: str
    words: tuple[str, ...]
    fields: dict[str, Value]
    line: str


# --------------------------------------------------------------------------- lines

def split_records(text: str, prefix: str) -> list[str]:
    """The bodies of all `prefix` lines; a line holding two records (the guest console
    interleaves the kernel's and the program's output) is split in two, and a kernel's
    `usertrap:` line inside one is taken out."""
    bodies = []
    for line in KILLED_LINE_RE.sub("", text.replace("\r", "")).split("\n"):
        at = line.find(prefix)
        if at < 0:
            continue
        for part in line[at:].split(prefix)[1:]:
            bodies.append(part.strip())
    return bodies


def line_kind(schema: Schema, body: str) -> str:
    """The schema's kind of one record body; ParseError for a kind the schema lacks."""
    for kind, pat in schema.fixed.items():
        if pat.fullmatch(body):
            return kind
    first = body.split(None, 1)[0] if body.strip() else ""
    kind = first.split("=", 1)[0]
    if kind in schema.keys:
        return kind
    raise ParseError(f"unknown {schema.program} line kind `{kind or body}` ({schema.doc})",
                     schema.prefix + body)


def parse_record(schema: Schema, body: str) -> Record:
    """One record body checked against its kind's keys (names, order and value types)."""
    kind, line = line_kind(schema, body), schema.prefix + body
    if kind in schema.fixed:
        m = schema.fixed[kind].fullmatch(body)
        assert m is not None
        fields: dict[str, Value] = {k: int(v) if INT_RE.fullmatch(v) else v
                                    for k, v in m.groupdict().items()}
        return Record(kind, (), fields, body)
    keys = schema.keys[kind]
    pairs = body.split()[0 if kind in schema.bare else 1:]
    rest: list[str] = []
    if kind in schema.explained:
        pairs, rest = pairs[:len(keys)], pairs[len(keys):]
    elif kind in schema.bare and len(pairs) > len(keys):
        raise ParseError(f"`{kind}=` line has more after its list", line)
    n = schema.words.get(kind, 0)
    if n:
        if len(pairs) < n or not all(w.isdigit() for w in pairs[:n]):
            raise ParseError(f"`{kind}` line needs its index", line)
    words, pairs = tuple(pairs[:n]), pairs[n:]
    trailer = schema.trailers.get(kind)
    if trailer:
        if not body.endswith(" " + trailer):
            raise ParseError(f"`{kind}` line must end with {trailer!r}", line)
        pairs = pairs[:len(pairs) - len(trailer.split())]
    got = [p.split("=", 1)[0] for p in pairs]
    want = [k for k, _ in keys]
    if got != want or any("=" not in p for p in pairs):
        raise ParseError(f"`{kind}` line must have the keys {' '.join(want)} in this order "
                         f"({schema.doc}), has {' '.join(got) or 'none'}", line)
    fields = {key: typed(kind, key, typ, p.split("=", 1)[1], line)
              for (key, typ), p in zip(keys, pairs, strict=True)}
    if kind in schema.explained:
        if not rest:
            raise ParseError(f"`{kind}=` line needs its explanation", line)
        fields["text"] = " ".join(rest)
    return Record(kind, words, fields, body)


def parse_records(schema: Schema, text: str) -> list[Record]:
    """Every `[<program>] ` line of `text`, each checked against its kind; ParseError when
    there is none."""
    bodies = split_records(text, schema.prefix)
    if not bodies:
        raise ParseError(f"no {schema.prefix.strip()} lines in the output", text)
    return [parse_record(schema, b) for b in bodies]


# --------------------------------------------------------------------------- runs

def check_order(schema: Schema, mode: str, records: list[Record], complete: bool,
                text: str) -> None:
    """`records` in the order of schema.modes[mode]; with `complete` every required line."""
    i = 0
    for kinds, least, most in schema.modes[mode]:
        n = 0
        while i < len(records) and records[i].kind in kinds and n < most:
            i, n = i + 1, n + 1
        if n < least:
            if i == len(records) and not complete:
                return
            where = (f"before the `{records[i].kind}` line" if i < len(records)
                     else "(the output ends)")
            raise ParseError(f"{mode} run: missing the `{' or '.join(kinds)}` line {where} "
                             f"({schema.doc})", text)
    if i < len(records):
        after = f" after `{records[i - 1].kind}`" if i else ""
        raise ParseError(f"{mode} run: unexpected `{records[i].kind}` line{after} "
                         f"({schema.doc})", schema.prefix + records[i].line)


def check_run(schema: Schema, records: list[Record], mode: str, require_complete: bool,
              text: str) -> bool:
    """Hold `records` to the order of `mode`. An error run (an `error` line, which must be
    the last) may stop anywhere: the lines before it must be the start of a `mode` run.
    Returns whether every line the mode requires had to be there."""
    if any(r.kind == "error" for r in records):
        if records[-1].kind != "error":
            raise ParseError("lines after the `error:` line", text)
        check_order(schema, mode, records[:-1], False, text)
        return False
    check_order(schema, mode, records, require_complete, text)
    return require_complete


def read_run(schema: Schema, text: str, shape: Callable[[list[Record]], str],
             require_complete: bool = True) -> tuple[list[Record], str, bool]:
    """One run's output: every `[<program>] ` line checked against its kind, then the lines
    against the order of the mode `shape(records)` names (for an error run, the mode its
    lines before the error began). Returns (records, that mode, whether the run had to be
    complete: check_run)."""
    records = parse_records(schema, text)
    mode = shape(records)
    return records, mode, check_run(schema, records, mode, require_complete, text)
