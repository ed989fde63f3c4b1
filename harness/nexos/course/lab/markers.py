"""Solution regions in the kernel sources: parse, check and strip them (docs/lab.md).

A region is three comment lines around the code a lab's students write:

    // LAB <lab>: begin [hint]     the solution starts on the next line
    <solution lines>
    // LAB <lab>: stub             optional; every line up to `end` is `// ` + a stub line
    // <stub lines>
    // LAB <lab>: end

A starter tree gets, in place of the whole region, one `// LAB <lab>: TODO <hint>` line and
the stub lines uncommented. Regions do not nest. Any comment line that starts with `// LAB`
must be one of these markers, naming a known lab.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

LABS = ("lazy", "cow", "mmap", "swap")
MARKED_SUFFIXES = (".c", ".h", ".S")  # the files whose markers are parsed
DEFAULT_HINT = "your code here (see LAB.md)"

_MARKER_RE = re.compile(r"^(?P<indent>[ \t]*)//\s*LAB\b(?P<rest>.*)$")
_FORM_RE = re.compile(r"^\s+(?P<lab>[A-Za-z0-9_-]+):\s*(?P<kind>begin|stub|end|TODO)\b\s*"
                      r"(?P<text>.*?)\s*$")
_STUB_RE = re.compile(r"^(?P<indent>[ \t]*)//(?: |$)(?P<code>.*)$")
_FUNC_RE = re.compile(r"^([A-Za-z_]\w*)\(")  # xv6 style: a definition's name at column 0


class MarkerError(ValueError):
    """A marker that is malformed, unbalanced, nested or names an unknown lab."""


@dataclass(frozen=True)
class Region:
    """One marked region. Line numbers are 1-based, of the marker lines."""

    path: str
    lab: str
    begin: int
    stub: int | None
    end: int
    indent: str
    hint: str
    function: str | None          # the function the region is in, if one can be seen
    solution: tuple[str, ...]     # the lines a student writes
    stub_lines: tuple[str, ...]   # what the starter tree has instead, uncommented

    def todo_line(self) -> str:
        """The line that stands for the region in a starter tree."""
        return f"{self.indent}// LAB {self.lab}: TODO {self.hint or DEFAULT_HINT}"


@dataclass
class _Open:
    lab: str
    begin: int
    indent: str
    hint: str
    stub: int | None = None


def _marker(line: str, path: str, n: int) -> tuple[str, str, str, str] | None:
    """(indent, lab, kind, text) of a marker line, None for any other line."""
    m = _MARKER_RE.match(line)
    if m is None:
        return None
    f = _FORM_RE.match(m["rest"])
    if f is None:
        raise MarkerError(f"{path}:{n}: malformed marker {line.strip()!r} "
                          "(expected `// LAB <lab>: begin|stub|end`)")
    if f["lab"] not in LABS:
        raise MarkerError(f"{path}:{n}: marker names unknown lab {f['lab']!r} "
                          f"(known: {', '.join(LABS)})")
    return m["indent"], f["lab"], f["kind"], f["text"]


def _function_at(lines: list[str], index: int) -> str | None:
    """The name of the function definition above lines[index], if any."""
    for line in reversed(lines[:index]):
        m = _FUNC_RE.match(line)
        if m:
            return m[1]
        if line.startswith("}"):
            return None  # the region is between functions
    return None


def _close(path: str, lines: list[str], o: _Open, end: int) -> Region:
    """The region opened by `o` and ended on line `end` (1-based)."""
    body_end = (o.stub or end) - 1
    solution = tuple(lines[o.begin:body_end])
    if not any(s.strip() for s in solution):
        raise MarkerError(f"{path}:{o.begin}: `LAB {o.lab}` region has no solution lines")
    stub: list[str] = []
    if o.stub is not None:
        for n in range(o.stub + 1, end):
            m = _STUB_RE.match(lines[n - 1])
            if m is None:
                raise MarkerError(f"{path}:{n}: stub line is not a `// ` comment: "
                                  f"{lines[n - 1].strip()!r}")
            stub.append(m["indent"] + m["code"] if m["code"] else "")
    return Region(path, o.lab, o.begin, o.stub, end, o.indent, o.hint,
                  _function_at(lines, o.begin - 1), solution, tuple(stub))


def parse(text: str, path: str) -> list[Region]:
    """Every region of one file, in order. MarkerError on any marker problem."""
    lines = text.splitlines()
    regions: list[Region] = []
    cur: _Open | None = None
    for n, line in enumerate(lines, 1):
        mk = _marker(line, path, n)
        if mk is None:
            continue
        indent, lab, kind, hint = mk
        if kind == "begin":
            if cur is not None:
                raise MarkerError(f"{path}:{n}: `LAB {lab}: begin` inside the `LAB {cur.lab}` "
                                  f"region begun on line {cur.begin} (regions do not nest)")
            cur = _Open(lab, n, indent, hint)
            continue
        if kind == "TODO":
            if cur is not None:
                raise MarkerError(f"{path}:{n}: `LAB {lab}: TODO` inside a region")
            continue  # a starter tree's placeholder: not a region
        if cur is None:
            raise MarkerError(f"{path}:{n}: `LAB {lab}: {kind}` without a `begin`")
        if lab != cur.lab:
            raise MarkerError(f"{path}:{n}: `LAB {lab}: {kind}` in the `LAB {cur.lab}` "
                              f"region begun on line {cur.begin}")
        if kind == "stub":
            if cur.stub is not None:
                raise MarkerError(f"{path}:{n}: second `stub` in the region begun on line "
                                  f"{cur.begin}")
            cur.stub = n
            continue
        regions.append(_close(path, lines, cur, n))
        cur = None
    if cur is not None:
        raise MarkerError(f"{path}:{cur.begin}: `LAB {cur.lab}: begin` has no `end`")
    return regions


def strip(text: str, regions: Iterable[Region], labs: Iterable[str]) -> str:
    """`text` (whose regions are `regions`, from parse) as a starter tree has it: the
    regions of `labs` become their TODO line and stub; the other regions keep their solution
    and lose their marker and stub lines."""
    lines = text.splitlines()
    want = set(labs)
    out: list[str] = []
    pos = 0
    for r in sorted(regions, key=lambda r: r.begin):
        out += lines[pos:r.begin - 1]
        if r.lab in want:
            out.append(r.todo_line())
            out += r.stub_lines
        else:
            out += r.solution
        pos = r.end
    out += lines[pos:]
    ending = "\n" if text.endswith("\n") or not text else ""
    return "\n".join(out) + ending
