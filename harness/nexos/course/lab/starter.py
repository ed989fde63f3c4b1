"""Write a lab's starter tree from the solution checkout (docs/lab.md).

The tree is the checkout's files (`git ls-files`: the tracked ones, as the working tree has
them, so build outputs, .venv and untracked experiments never come along) with the lab's
regions replaced by their stubs, plus LAB.md, committed once into a fresh git repository.
Nothing is written unless every marker in the checkout is sound and no line of a removed
region survives anywhere in the tree.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nexos.course.lab.labmd import lab_md
from nexos.course.lab.markers import MARKED_SUFFIXES, MarkerError, Region, parse, strip
from nexos.course.lab.plan import LabError, labs_of

AUTHOR = ("NexOS lab kit", "lab-kit@nexos.invalid")
COMMIT_DATE = "2026-01-01T00:00:00+0000"  # fixed, so the same tree gives the same commit
MIN_LEAK_CHARS = 6  # shorter removed lines (`}`, `return;`) cannot reveal anything


class StarterError(RuntimeError):
    """The starter tree cannot (or must not) be written; the message says why."""


@dataclass(frozen=True)
class StarterTree:
    """What make_starter wrote."""

    out: Path
    labs: tuple[str, ...]
    regions: tuple[Region, ...]   # the regions that were replaced by stubs
    files: int                    # files written, LAB.md included
    commit: str


def source_files(src: Path) -> list[str]:
    """The checkout's tracked files (staged ones included) that exist in the working tree."""
    try:
        proc = subprocess.run(["git", "-C", str(src), "ls-files", "-z"], capture_output=True,
                              check=False)
    except FileNotFoundError:
        raise StarterError("git is not installed; it lists the checkout's files") from None
    if proc.returncode != 0:
        raise StarterError(f"{src} is not a git checkout: "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    names = {n for n in proc.stdout.decode(errors="surrogateescape").split("\0") if n}
    return sorted(n for n in names if (src / n).is_file() or (src / n).is_symlink())


def normalize(line: str) -> str:
    """A line as the leak check compares it: no indentation, no leading comment marks, runs
    of blanks as one space (so a commented-out or re-indented copy still matches)."""
    s = line.strip()
    while True:
        t = re.sub(r"^(//+|#+|/\*+|\*+|>+)\s*", "", s)
        if t == s:
            break
        s = t
    return re.sub(r"\s+", " ", s)


def _marked(name: str) -> bool:
    return name.endswith(MARKED_SUFFIXES)


def _read_bytes(src: Path, name: str) -> bytes:
    """The bytes of the checkout's file `name`; StarterError `<name>: cannot read (...)`."""
    try:
        return (src / name).read_bytes()
    except OSError as e:
        raise StarterError(f"{name}: cannot read ({e.strerror or e})") from None


def _read_marked(src: Path, name: str) -> str:
    """The text of a marked-kind source file. MarkerError `<name>:<line>: ...` when it is
    not UTF-8: its markers could not be read, and a region in it would reach the starter
    tree unstripped."""
    data = _read_bytes(src, name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise MarkerError(f"{name}:{line}: not UTF-8 text (the lab kit reads the `// LAB` "
                          f"markers of every {'/'.join(MARKED_SUFFIXES)} file)") from None


def collect_regions(src: Path, names: Iterable[str]) -> tuple[dict[str, str], list[Region]]:
    """The text of every marked-kind source file and all their regions. MarkerError (with
    file and line) for the first unsound marker anywhere."""
    texts: dict[str, str] = {}
    regions: list[Region] = []
    for n in names:
        if not _marked(n) or (src / n).is_symlink():
            continue
        text = _read_marked(src, n)
        texts[n] = text
        regions += parse(text, n)
    return texts, regions


def _revealing(removed: list[Region], kept_code: set[str]) -> set[str]:
    """The lines of the removed regions that could reveal the solution: long enough, with a
    letter or digit, and not also in the kernel sources outside those regions."""
    lines = {normalize(s) for r in removed for s in r.solution}
    return {s for s in lines
            if len(s) >= MIN_LEAK_CHARS and re.search(r"\w", s) and s not in kept_code}


def find_leaks(outputs: dict[str, bytes], removed: list[Region],
               kept_code: set[str]) -> list[str]:
    """`path:line: text` for every output line equal (after normalize) to a revealing line."""
    bad = _revealing(removed, kept_code)
    leaks = []
    for name, data in sorted(outputs.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if normalize(line) in bad:
                leaks.append(f"{name}:{n}: {line.strip()}")
    return leaks


def _kept_code(texts: dict[str, str], regions: list[Region], labs: set[str]) -> set[str]:
    """Normalized lines of the marked sources outside the regions being removed."""
    inside: dict[str, set[int]] = {}
    for r in regions:
        if r.lab in labs:
            inside.setdefault(r.path, set()).update(range(r.begin, r.end + 1))
    kept = set()
    for name, text in texts.items():
        skip = inside.get(name, set())
        kept.update(normalize(s) for n, s in enumerate(text.splitlines(), 1) if n not in skip)
    return kept


def build_outputs(src: Path, names: list[str], lab: str) -> tuple[dict[str, bytes],
                                                                  list[Region]]:
    """Every output file's bytes (LAB.md included) and the regions replaced by stubs.
    Refuses (StarterError) unsound markers, a lab without regions, and leaks."""
    labs = labs_of(lab)
    try:
        texts, regions = collect_regions(src, names)
    except MarkerError as e:
        raise StarterError(str(e)) from None  # `<file>:<line>: <why>`, as parse says it
    for x in labs:
        if not any(r.lab == x for r in regions):
            raise StarterError(f"no `// LAB {x}:` regions in {src}: not a solution tree "
                               "(a starter tree has only TODO lines)")
    by_file: dict[str, list[Region]] = {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    outputs: dict[str, bytes] = {}
    for n in names:
        if n in by_file:
            outputs[n] = strip(texts[n], by_file[n], labs).encode("utf-8")
        elif not (src / n).is_symlink():
            outputs[n] = _read_bytes(src, n)
    removed = [r for r in regions if r.lab in labs]
    outputs["LAB.md"] = lab_md(lab, removed).encode("utf-8")
    leaks = find_leaks(outputs, removed, _kept_code(texts, regions, set(labs)))
    if leaks:
        more = f" (and {len(leaks) - 3} more)" if len(leaks) > 3 else ""
        raise StarterError("a solution line would survive in the starter tree: "
                           + "; ".join(leaks[:3]) + more)
    return outputs, removed


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise StarterError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise StarterError(f"{out} is not empty; give a new or empty directory")


def _write(src: Path, out: Path, names: list[str], outputs: dict[str, bytes]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        dest = out / n
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (src / n).is_symlink():
            os.symlink(os.readlink(src / n), dest)
            continue
        dest.write_bytes(outputs[n])
        os.chmod(dest, (src / n).stat().st_mode & 0o777)
    (out / "LAB.md").write_bytes(outputs["LAB.md"])


def _git(out: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1],
           "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1],
           "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    proc = subprocess.run(["git", "-C", str(out), "-c", "commit.gpgsign=false",
                           "-c", "init.defaultBranch=main", *args],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise StarterError(f"git {args[0]} in {out} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def make_starter(src: Path, lab: str, out: Path) -> StarterTree:
    """Write the starter tree of `lab` (lazy, cow, mmap, swap or all) from checkout `src`
    into `out`, which must be new or empty, as a git repository with one commit."""
    try:
        labs = labs_of(lab)
    except LabError as e:
        raise StarterError(str(e)) from None
    src, out = src.resolve(), out.resolve()
    if out == src or src in out.parents:
        raise StarterError(f"{out} is inside the checkout {src}; write the tree elsewhere")
    _check_out(out)
    names = source_files(src)
    outputs, removed = build_outputs(src, names, lab)
    _write(src, out, names, outputs)
    _git(out, "init", "-q")
    _git(out, "add", "-A")
    _git(out, "commit", "-q", "-m", f"NexOS {lab} lab: starter tree")
    return StarterTree(out, labs, tuple(removed), len(outputs), _git(out, "rev-parse", "HEAD"))
