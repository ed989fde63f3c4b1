"""`nexos lab handin`: the zip a student uploads, made from a starter tree's last commit
(docs/lab.md, "Handing in").

The zip is `git archive` of HEAD: exactly the tracked files as committed (never build/,
.venv/ or a stray file), under one folder named after the lab. It refuses a tree that is
not the lab's starter tree (its LAB.md names the lab: nexos.course.lab.labmd) and, unless --force,
one with changes that are not committed, which would be missing from the zip.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import click

from nexos.course.lab.labmd import TITLES
from nexos.course.lab.plan import LAB_CHOICES
from nexos.machine.config import ConfigError, find_repo

TITLE_PREFIX = "# NexOS lab: "
SHOWN_CHANGES = 10  # a refusal lists at most this many paths


class HandinError(click.ClickException):
    """The zip is not written; one line `nexos: error: ...`, exit status 1."""


def _git(tree: Path, *args: str) -> str:
    try:
        p = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                           check=False)
    except FileNotFoundError:
        raise HandinError("git is not installed; the zip is made from the tree's commits") \
            from None
    if p.returncode != 0:
        raise HandinError(f"{tree}: git {args[0]} failed: {p.stderr.strip()}")
    return p.stdout


def tree_lab(tree: Path) -> str | None:
    """The lab a starter tree is for, from its LAB.md title (`# NexOS lab: <title> and
    <title>`, written by labmd.lab_md); None when there is no such title."""
    try:
        first = (tree / "LAB.md").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        return None
    if not first.startswith(TITLE_PREFIX):
        return None
    rest, labs = first[len(TITLE_PREFIX):], []
    while rest:  # titles joined by " and " (a title may hold " and " itself: mmap's does)
        one = next((x for x, title in TITLES.items() if rest.startswith(title)), None)
        if one is None:
            return None
        labs.append(one)
        rest = rest[len(TITLES[one]):]
        if rest and not rest.startswith(" and "):
            return None
        rest = rest[len(" and "):]
    return next((name for name, members in LAB_CHOICES.items()
                 if tuple(labs) == tuple(members)), None)


def uncommitted(tree: Path) -> list[str]:
    """`git status --porcelain` lines: changed, staged, deleted and untracked (not ignored)."""
    return [ln for ln in _git(tree, "status", "--porcelain").splitlines() if ln.strip()]


def zip_name(lab: str) -> str:
    return f"nexos-{lab}-handin.zip"


def handin(tree: Path, lab: str, out: Path | None = None, force: bool = False
           ) -> tuple[Path, str, list[str]]:
    """Write the zip of `tree`'s HEAD for `lab`. Returns (zip path, commit, the uncommitted
    changes that --force let through, which are not in the zip). HandinError on refusal."""
    top = Path(_git(tree, "rev-parse", "--show-toplevel").strip())
    found = tree_lab(top)
    if found is None:
        raise HandinError(f"{top} is not a lab starter tree (no `{TITLE_PREFIX}...` title in "
                          "LAB.md; `nexos lab make` writes one)")
    if found != lab:
        raise HandinError(f"{top} is the {found} lab's tree (LAB.md), not the {lab} lab's: "
                          f"hand it in with --lab {found}, or run this in your {lab} tree")
    changes = uncommitted(top)
    if changes and not force:
        shown = "; ".join(c.strip() for c in changes[:SHOWN_CHANGES])
        more = f" (and {len(changes) - SHOWN_CHANGES} more)" if len(changes) > SHOWN_CHANGES else ""
        raise HandinError(f"{len(changes)} uncommitted change(s), which would be missing from "
                          f"the zip: {shown}{more}; commit them (git add -A; git commit), or "
                          "--force to hand in the last commit as it is")
    commit = _git(top, "rev-parse", "HEAD").strip()
    if out is None:
        (top / "build").mkdir(exist_ok=True)  # ignored by git, so the zip never dirties the tree
    dest = (out or top / "build" / zip_name(lab)).resolve()
    if not dest.parent.is_dir():
        raise HandinError(f"{dest}: cannot write (no folder {dest.parent})")
    _git(top, "archive", "--format=zip", f"--prefix=nexos-{lab}/", "-o", str(dest), "HEAD")
    return dest, commit, changes if force else []


@click.command("handin")
@click.option("--lab", "which", type=click.Choice(list(LAB_CHOICES)), required=True,
              help="The lab you hand in; the tree's LAB.md must name the same one.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The zip to write (default: build/nexos-LAB-handin.zip in the tree).")
@click.option("--tree", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="The starter tree (default: the one around the working "
                                 "directory).")
@click.option("--force", is_flag=True,
              help="Hand in the last commit even with uncommitted changes (they stay out).")
def handin_cmd(which: str, out: Path | None, tree: Path | None, force: bool) -> None:
    """Write the zip to upload: the tree's last commit, every tracked file. Refuses a tree
    of another lab, and one with uncommitted changes unless --force."""
    if tree is None:
        try:
            tree = find_repo()
        except ConfigError as e:
            raise HandinError(str(e)) from None
    dest, commit, left_out = handin(tree, which, out, force)
    with zipfile.ZipFile(dest) as z:
        files = sum(1 for i in z.infolist() if not i.is_dir())
    if left_out:
        click.echo(f"nexos: warning: --force: {len(left_out)} uncommitted change(s) are not "
                   "in the zip", err=True)
    click.echo(f"wrote {dest}: {files} files of commit {commit[:12]} ({which} lab)")
