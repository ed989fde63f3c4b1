"""A course's stock-xv6 test programs drop in unmodified through EXTRA_UPROGS.

The programs in tests/course/programs/ are written the way a course writes hidden tests
against stock xv6: classic headers, sloppy printf formats, memory sized from PHYSTOP -
KERNBASE, a file named like a built-in. They are built with `make EXTRA_UPROGS=...` in a
copy of the checkout, so that they never land on the images other tests boot, and run in
the real kernel at MEMSIZE=384 (docs/userland.md, "Programs from outside the tree")."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from nexos.machine.build import BuildResult, build_one, make_base
from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import find_panic, parse_test_verdict
from support import copy_checkout

pytestmark = pytest.mark.qemu

REPO = Path(__file__).resolve().parents[2]
MEM = 384
COURSE = Path(__file__).resolve().parent / "programs"
PROGRAMS = ("lazytests", "cowbig", "sloppy", "readme")
SOURCES = tuple(COURSE / f"{name}.c" for name in PROGRAMS)
EXTRA = (f"EXTRA_UPROGS={' '.join(str(s) for s in SOURCES)}",)
LAZY_COW = BuildConfig(1, 1, MEM)
EAGER_COW = BuildConfig(0, 1, MEM)
EAGER_COPY = BuildConfig(0, 0, MEM)

Builder = Callable[[BuildConfig, bool], BuildResult]


@pytest.fixture(scope="module")
def course_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copy of the checkout (its models shared) that the course programs are built in:
    EXTRA_UPROGS changes a build folder's images, which in the checkout other tests boot."""
    return copy_checkout(tmp_path_factory.mktemp("course"), share_models=True)


@pytest.fixture(scope="module")
def course_build(course_tree: Path) -> Builder:
    """course_build(config, llm) -> make's result with the course programs as EXTRA_UPROGS
    in course_tree; make runs once per (config, llm) in this module."""
    done: dict[tuple[BuildConfig, bool], BuildResult] = {}

    def build(config: BuildConfig, llm: bool = False) -> BuildResult:
        key = (config, llm)
        if key not in done:
            res = build_one(course_tree, config, llm=llm, extra=EXTRA)
            if not res.ok:
                pytest.fail(f"make {config.folder} with EXTRA_UPROGS failed:\n{res.excerpt}")
            done[key] = res
        return done[key]

    return build


def run_all(tree: Path, config: BuildConfig, *commands: str, llm: bool = False,
            timeout: float = 600) -> list[str]:
    """Boot the configuration's image in tree and run the commands; their outputs, in
    order."""
    with QemuSession.for_config(config, tree, llm=llm) as s:
        return [s.run(c, timeout=timeout).output for c in commands]


def passed(output: str) -> bool:
    """The program ended with ALL TESTS PASSED and the kernel did not panic."""
    return parse_test_verdict(output).passed


# --------------------------------------------------------------------------- the build


def test_extra_named_like_builtin_replaces_it(course_build: Builder):
    res = course_build(LAZY_COW, False)
    line = f"EXTRA_UPROGS: {COURSE / 'lazytests.c'} replaces the built-in lazytests"
    assert line in res.output.splitlines(), res.output[:2000]
    assert res.output.count("replaces the built-in") == 1  # only lazytests is a built-in name
    listed = (res.build_dir / "image.list").read_text().split()
    d = f"build/{LAZY_COW.folder}"
    assert f"{d}/extra/_lazytests" in listed
    assert f"{d}/user/_lazytests" not in listed
    assert f"{d}/user/_cowtests" in listed and "README=README.md" in listed


def test_sloppy_formats_are_warnings_for_extra_programs(course_build: Builder):
    out = course_build(LAZY_COW, False).output
    sloppy = [ln for ln in out.splitlines() if ln.startswith(f"{COURSE / 'sloppy.c'}:")]
    assert any("warning: format '%p'" in ln and "[-Wformat=]" in ln for ln in sloppy), sloppy
    assert any("[-Wformat-extra-args]" in ln for ln in sloppy), sloppy
    assert not [ln for ln in out.splitlines() if "error:" in ln.lower()]
    for name in ("lazytests", "cowbig", "readme"):  # the careful ones compile silently
        assert f"{COURSE / name}.c:" not in out


def dry_run_compile(config: BuildConfig, target: str) -> list[str]:
    """The compiler command make would run for one object (make -n -B: nothing is built)."""
    r = subprocess.run([*make_base(REPO), "-n", "-B", *config.make_vars(), *EXTRA,
                        f"build/{config.folder}/{target}"],
                       capture_output=True, text=True, check=True)
    cmds = [ln for ln in r.stdout.splitlines() if " -c -o " in ln]
    assert len(cmds) == 1, r.stdout
    return shlex.split(cmds[0])


def test_tree_programs_keep_werror_and_see_memsize(tmp_path: Path):
    """The tree's own programs keep -Werror and the format checking: the sloppy program
    compiled with their exact command fails. Both kinds are user programs (NEXOS_USER:
    PHYSTOP is the booted RAM's end, from memstat), and no RAM size is compiled in."""
    own = dry_run_compile(LAZY_COW, "obj/user/cat.o")
    extra = dry_run_compile(LAZY_COW, "obj/extra/sloppy.o")
    assert "-Werror" in own and "-Werror" not in extra
    assert "-DNEXOS_USER" in own and "-DNEXOS_USER" in extra
    assert not [a for a in own + extra if a.startswith("-DMEMSIZE")]
    cmd = [str(COURSE / "sloppy.c") if a == "user/cat.c" else a for a in own]
    cmd[cmd.index("-o") + 1] = str(tmp_path / "sloppy.o")
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode != 0
    assert "error: format '%p' expects argument" in r.stderr, r.stderr[-2000:]


def test_two_extra_programs_with_one_name_are_refused(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "same.c").write_text("int main(void) { return 0; }\n")
    r = subprocess.run([*make_base(REPO), "-n", *LAZY_COW.make_vars(),
                        f"EXTRA_UPROGS={a / 'same.c'} {b / 'same.c'}"],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "EXTRA_UPROGS: two files with the same name" in r.stderr


def make_extra_object(tree: Path, src: Path) -> subprocess.CompletedProcess[str]:
    """make just the object of one extra program in tree's LAZY_COW folder (nothing else)."""
    return subprocess.run([*make_base(tree), *LAZY_COW.make_vars(), f"EXTRA_UPROGS={src}",
                           f"build/{LAZY_COW.folder}/obj/extra/{src.stem}.o"],
                          capture_output=True, text=True)


def test_extra_program_may_move_and_missing_one_is_named(course_tree: Path, tmp_path: Path):
    """A course's file under a new path (a fresh temporary folder per run) builds although
    the old path is gone; a missing file is named in one line."""
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        d.mkdir()
        (d / "movedprog.c").write_text("int main(void) { return 0; }\n")
    obj = course_tree / "build" / LAZY_COW.folder / "obj" / "extra" / "movedprog.o"
    try:
        r = make_extra_object(course_tree, old / "movedprog.c")
        assert r.returncode == 0, r.stdout + r.stderr
        (old / "movedprog.c").unlink()
        r = make_extra_object(course_tree, new / "movedprog.c")
        assert r.returncode == 0, r.stdout + r.stderr
        r = make_extra_object(course_tree, old / "movedprog.c")
        assert r.returncode != 0
        assert f"EXTRA_UPROGS: no such file: {old / 'movedprog.c'}" in r.stderr
    finally:
        obj.unlink(missing_ok=True)


# --------------------------------------------------------------------------- in the kernel


def test_course_programs_pass_in_lazy_cow_kernel(course_tree: Path, course_build: Builder):
    course_build(LAZY_COW, False)
    lazy, cow, sloppy, readme = run_all(course_tree, LAZY_COW, "lazytests", "cowbig", "sloppy",
                                        "readme")
    assert "course lazytests: starting" in lazy  # the course's program, not the built-in
    assert re.search(r"^test oom: OK$", lazy, re.M) and passed(lazy), lazy
    assert f"cowbig: PHYSTOP - KERNBASE = {MEM} MiB" in cow
    assert passed(cow), cow
    assert re.search(r"^sloppy: p=0x0*1234$", sloppy, re.M), sloppy
    assert "sloppy: d=42\nsloppy: extra\n" in sloppy
    assert passed(sloppy), sloppy
    assert passed(readme), readme


def test_readme_on_both_images(course_tree: Path, course_build: Builder):
    """/README is the project's README.md on fs.img and on fs-llm.img."""
    course_build(LAZY_COW, True)
    first = (REPO / "README.md").read_text().splitlines()[0]
    for llm in (False, True):
        (out,) = run_all(course_tree, LAZY_COW, "readme", llm=llm)
        assert passed(out), out
        assert f"readme: first line: {first}" in out
        m = re.search(r"^readme: size (\d+) read (\d+)$", out, re.M)
        assert m and int(m[1]) == int(m[2]) > 0, out


def test_cow_sized_program_passes_with_eager_cow(course_tree: Path, course_build: Builder):
    course_build(EAGER_COW, False)
    (out,) = run_all(course_tree, EAGER_COW, "cowbig")
    assert f"cowbig: PHYSTOP - KERNBASE = {MEM} MiB" in out
    assert passed(out), out


def test_cow_sized_program_fails_cleanly_without_cow(course_tree: Path, course_build: Builder):
    """Without COW, forking a process that holds two thirds of RAM cannot be done: fork
    returns -1, the program reports the failure, every page comes back and the kernel goes
    on (no panic, no kill of the shell)."""
    course_build(EAGER_COPY, False)
    before, out, after, alive = run_all(course_tree, EAGER_COPY, "freecheck", "cowbig",
                                        "freecheck", "echo still alive")
    assert find_panic(out) is None
    assert "simple: fork failed (round 0)" in out
    assert re.search(r"^test simple: FAILED$", out, re.M)
    assert not passed(out)
    free = [re.search(r"free_pages=(\d+)", t) for t in (before, after)]
    assert free[0] and free[1] and free[0][1] == free[1][1], (before, after)
    assert alive.strip() == "still alive"
