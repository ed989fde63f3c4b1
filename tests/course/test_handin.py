"""`nexos lab handin` (docs/lab.md, "Handing in"): the zip of a starter tree's last commit;
refused for uncommitted changes (listed; --force hands in the commit anyway) and for a tree
of another lab. The starter tree is made by `nexos lab make`, as a course makes it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nexos.course.lab.handin import tree_lab
from nexos.course.lab.labmd import lab_md
from nexos.course.lab.plan import LAB_CHOICES

STUDENT = {"GIT_AUTHOR_NAME": "A Student", "GIT_AUTHOR_EMAIL": "student@example.invalid",
           "GIT_COMMITTER_NAME": "A Student", "GIT_COMMITTER_EMAIL": "student@example.invalid"}


def nexos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NEXOS_REPO"}
    return subprocess.run([sys.executable, "-m", "nexos", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, stdin=subprocess.DEVNULL)


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), "-c", "commit.gpgsign=false", *args],
                          env={**os.environ, **STUDENT}, check=True, capture_output=True,
                          text=True).stdout


def one_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nexos: error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def starter(repo, tmp_path_factory) -> Path:
    """A lazy starter tree from `nexos lab make`, with one commit of a student's work."""
    out = tmp_path_factory.mktemp("handin") / "lazy"
    r = nexos(repo, "lab", "make", "--lab", "lazy", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    vm = out / "kernel" / "vm.c"
    vm.write_text(vm.read_text() + "// a student's line\n")
    git(out, "commit", "-q", "-am", "lazy: my work")
    return out


def test_handin_zips_the_last_commit(starter):
    zpath = starter / "build" / "nexos-lazy-handin.zip"
    zpath.unlink(missing_ok=True)
    r = nexos(starter, "lab", "handin", "--lab", "lazy")
    assert r.returncode == 0, r.stdout + r.stderr
    head = git(starter, "rev-parse", "HEAD").strip()
    assert f"wrote {zpath}" in r.stdout and head[:12] in r.stdout
    tracked = set(git(starter, "ls-files").split())
    with zipfile.ZipFile(zpath) as z:
        names = {i.filename for i in z.infolist() if not i.is_dir()}
        assert names == {f"nexos-lazy/{f}" for f in tracked}
        assert "// a student's line" in z.read("nexos-lazy/kernel/vm.c").decode()
        assert z.read("nexos-lazy/LAB.md") == (starter / "LAB.md").read_bytes()
        assert z.comment.decode() == head   # git archive records the commit
    assert not any(n.startswith(("nexos-lazy/build/", "nexos-lazy/.venv/")) for n in names)
    assert git(starter, "status", "--porcelain") == ""   # the zip under build/ is ignored


def test_uncommitted_changes_are_refused_and_listed(starter, tmp_path):
    vm = starter / "kernel" / "vm.c"
    committed = vm.read_text()
    vm.write_text(committed + "// not committed\n")
    (starter / "notes.txt").write_text("untracked\n")
    out = tmp_path / "h.zip"
    try:
        msg = one_error(nexos(starter, "lab", "handin", "--lab", "lazy", "--out", str(out)))
        assert "2 uncommitted change(s)" in msg
        assert "M kernel/vm.c" in msg and "?? notes.txt" in msg and "--force" in msg
        assert not out.exists()
        r = nexos(starter, "lab", "handin", "--lab", "lazy", "--out", str(out), "--force")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 uncommitted change(s) are not in the zip" in r.stderr
        with zipfile.ZipFile(out) as z:
            assert z.read("nexos-lazy/kernel/vm.c").decode() == committed
            assert "nexos-lazy/notes.txt" not in z.namelist()
    finally:
        vm.write_text(committed)
        (starter / "notes.txt").unlink()


def test_the_wrong_lab_is_refused(starter, tmp_path):
    out = tmp_path / "h.zip"
    msg = one_error(nexos(starter, "lab", "handin", "--lab", "cow", "--out", str(out)))
    assert "is the lazy lab's tree (LAB.md), not the cow lab's" in msg
    assert "--lab lazy" in msg and not out.exists()


def test_a_tree_that_is_no_starter_is_refused(repo, tmp_path):
    msg = one_error(nexos(repo, "lab", "handin", "--lab", "lazy", "--out",
                          str(tmp_path / "h.zip")))
    assert "is not a lab starter tree" in msg


@pytest.mark.parametrize("lab", list(LAB_CHOICES))
def test_tree_lab_reads_what_lab_md_writes(tmp_path, lab):
    (tmp_path / "LAB.md").write_text(lab_md(lab, []))
    assert tree_lab(tmp_path) == lab
    (tmp_path / "LAB.md").write_text("# Some other README\n")
    assert tree_lab(tmp_path) is None
