"""A student's submission -> a fresh copy of the pristine starter tree with only the student's
files taken from it (docs/lab.md, "Grading a course").

A submission is a folder holding the tree (at its top or one or two folders down), a zip of
it, or a git bundle. Only the files that the lab lets students change are read from it: the
files holding the lab's marked regions, plus any a teaching assistant names. Everything else
(the test programs, the harness that grades, the Makefile) comes from the pristine tree, so an
edited test program or grader changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nexos.course.lab.plan import labs_of
from nexos.course.lab.starter import collect_regions, source_files
from nexos.machine.treecopy import copy_tree

# Folders of a pristine tree that a per-submission copy links to instead of copying: the model
# asset and the models made from it are large and read-only while grading.
SHARED_BUILD_DIRS = ("assets", "models")
SKIPPED_NAMES = {".venv", ".git", "__pycache__"}
FORMS = "a folder with the tree, a .zip of it, or a git bundle"


class SubmissionError(ValueError):
    """A submission that cannot be read; the message says why (it goes into the report)."""


@dataclass(frozen=True)
class PreparedTree:
    """What prepare_tree made: the tree to grade and which student files it took."""

    tree: Path
    copied: tuple[str, ...]    # student files taken from the submission
    missing: tuple[str, ...]   # student files the submission lacks: the starter's stay


def student_files(src: Path, lab: str, extra: Iterable[str] = ()) -> list[str]:
    """The files a student of `lab` may change: those holding the lab's marked regions in the
    solution checkout `src`, plus `extra` (paths relative to the tree)."""
    labs = set(labs_of(lab))
    _, regions = collect_regions(src, source_files(src))
    names = {r.path for r in regions if r.lab in labs}
    for e in extra:
        p = PurePosixPath(e)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise SubmissionError(f"student file {e!r}: need a path inside the tree")
        names.add(str(p))
    return sorted(names)


def content_hash(path: Path) -> str:
    """sha256 of a submission: a file's bytes, or a folder's relative paths and file bytes
    (sorted; .git and symlinks' targets included as text)."""
    h = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if p.is_symlink():
            h.update(f"L {rel} {os.readlink(p)}\0".encode())
        elif p.is_file():
            h.update(f"F {rel}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _safe_member(name: str) -> PurePosixPath | None:
    """A zip member's path if it stays inside the extraction folder, else None."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == "__MACOSX":
        return None
    return p


def extract_zip(archive: Path, dest: Path) -> None:
    """Unpack a zip into dest: regular files and folders only (no symlinks, nothing outside
    dest), with the members' permission bits."""
    try:
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                p = _safe_member(info.filename)
                mode = info.external_attr >> 16
                if p is None or stat.S_ISLNK(mode):
                    continue
                target = dest.joinpath(*p.parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                if mode & 0o777:
                    os.chmod(target, mode & 0o777)
    except (zipfile.BadZipFile, OSError) as e:
        raise SubmissionError(f"{archive.name}: cannot unpack the zip ({e})") from None


def _clone_bundle(bundle: Path, dest: Path) -> None:
    proc = subprocess.run(["git", "clone", "-q", str(bundle), str(dest)], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise SubmissionError(f"{bundle.name}: not a git bundle git can clone "
                              f"({proc.stderr.strip().splitlines()[-1:] or ['no message']})")


def _is_bundle(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16).startswith(b"# v2 git bundle") or path.suffix == ".bundle"


def _unpack_file(path: Path, scratch: Path) -> Path:
    dest = scratch / "unpacked"
    if zipfile.is_zipfile(path):
        extract_zip(path, dest)
    elif _is_bundle(path):
        _clone_bundle(path, dest)
    else:
        raise SubmissionError(f"{path.name}: not {FORMS}")
    return dest


def find_root(d: Path, depth: int = 3) -> Path | None:
    """The shallowest folder at most `depth` levels down that holds a tree (a kernel/ folder)."""
    level = [d]
    for _ in range(depth + 1):
        for x in level:
            if (x / "kernel").is_dir() and not (x / "kernel").is_symlink():
                return x
        level = sorted(c for x in level for c in x.iterdir()
                       if c.is_dir() and not c.is_symlink() and c.name not in SKIPPED_NAMES
                       and c.name != "__MACOSX")
    return None


def unpack(submission: Path, scratch: Path) -> Path:
    """The folder holding the submitted tree; zips and bundles are unpacked into scratch."""
    if submission.is_file():
        root = find_root(_unpack_file(submission, scratch))
    elif submission.is_dir():
        root = find_root(submission)
        if root is None:
            files = [p for p in submission.iterdir() if p.is_file()]
            if len(files) == 1:
                root = find_root(_unpack_file(files[0], scratch))
    else:
        raise SubmissionError(f"{submission}: no such file or folder")
    if root is None:
        raise SubmissionError(f"{submission.name}: no NexOS tree (a kernel/ folder) in it; "
                              f"submit {FORMS}")
    return root


def copy_pristine(pristine: Path, dest: Path) -> None:
    """A fresh copy of the pristine tree (its build/ too, so make only redoes what the
    student's files change; the disk images stay sparse); build/assets and build/models
    are links to the pristine's."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n in SKIPPED_NAMES}
        if Path(folder) == pristine / "build":
            skip |= {n for n in names if n in SHARED_BUILD_DIRS}
        return skip
    copy_tree(pristine, dest, ignore)
    for name in SHARED_BUILD_DIRS:
        if (pristine / "build" / name).is_dir():
            (dest / "build" / name).symlink_to((pristine / "build" / name).resolve())


def _student_file(root: Path, name: str) -> Path | None:
    """root/name if it is a regular file inside root (no symlink anywhere on the way)."""
    p = root
    for part in PurePosixPath(name).parts:
        p = p / part
        if p.is_symlink():
            return None
    return p if p.is_file() else None


def prepare_tree(pristine: Path, submission: Path, names: Iterable[str], work: Path
                 ) -> PreparedTree:
    """work/tree: the pristine tree with each of `names` taken from the submission (when it
    has that file); SubmissionError when the submission cannot be read."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    root = unpack(submission, work / "scratch")
    tree = work / "tree"
    copy_pristine(pristine, tree)
    copied, missing = [], []
    for name in names:
        src = _student_file(root, name)
        if src is None:
            missing.append(name)
            continue
        dest = tree / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        shutil.copyfile(src, dest)  # a new mtime: make rebuilds what depends on it
        copied.append(name)
    shutil.rmtree(work / "scratch", ignore_errors=True)
    return PreparedTree(tree, tuple(copied), tuple(missing))
