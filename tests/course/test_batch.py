"""Grading a class (docs/lab.md, "Grading a course"): `nexos lab batch` on 9 synthetic
submissions (solutions as folder, zip and git bundle, a starter; one that hangs the kernel,
one that panics it, one that does not build, two that edit the tests or the grader) in
real QEMU, as shards 1/3, 2/3, 3/3 side by side, merged with `nexos lab batch-merge`: every
student is graded once and has the grade its kind deserves, and an unsharded run over the
gathered results grades nothing again and gives the same gradebook. Also: the worked CI and
Slurm examples call the real commands with options they accept."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nexos.course.lab.batch import list_submissions, parse_shard, shard_of
from nexos.course.lab.cli import lab
from nexos.course.lab.starter import collect_regions, make_starter, source_files
from nexos.course.lab.submission import student_files
from support import BY_DESIGN

REPO = Path(__file__).resolve().parents[2]
CFG = "lazy1-cow0"
# The smallest plan that tells starter from solution: the lazy lab's lazytests (a lab check
# there) and cowtests (a non-lab check: a submission must not break it).
PLAN = ["--lab", "lazy", "--configs", CFG, "--checks", "lazytests,cowtests"]
# A hang is stopped by the per-submission limit (a check's own limit is 600 s); grading
# a submission that does not hang takes a few seconds.
TIMEOUT = "40"
LAZY_FAULT = "  p->lazy_faults++;\n"
# The hanging submission's first lazy fault never returns. It sleeps rather than spins:
# the batch sees the same hang (no prompt until its time limit), and QEMU idles meanwhile
# instead of taking a core from the rest of the suite for the whole limit.
HANG = ("  for(;;){\n    acquire(&tickslock);\n    sleep(&ticks, &tickslock);\n"
        "    release(&tickslock);\n  }\n")
ALWAYS_PASSES = ('#include "kernel/types.h"\n#include "user/user.h"\n'
                 'int\nmain(void)\n{\n  printf("ALL TESTS PASSED\\n");\n  exit(0);\n}\n')


def git(d: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(d), "-c", "user.name=student",
                           "-c", "user.email=student@nexos.invalid", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def as_folder(tree: Path, dest: Path) -> None:
    shutil.copytree(tree, dest, ignore=shutil.ignore_patterns(".git"))


def as_zip(tree: Path, dest: Path) -> None:
    with zipfile.ZipFile(dest.with_suffix(".zip"), "w") as z:
        for f in git(tree, "ls-files").splitlines():
            z.write(tree / f, f"lab/{f}")


def as_bundle(tree: Path, dest: Path) -> None:
    git(tree, "bundle", "create", str(dest.with_suffix(".bundle")), "HEAD", "main")


def lazy_solution(solution: Path) -> tuple[dict[str, str], str]:
    """The lazy lab's student files in the solution (path -> text: a solved submission has
    all of them) and which of them holds lazyfault(), the one the broken submissions edit."""
    _, regions = collect_regions(solution, source_files(solution))
    (fault,) = {r.path for r in regions if r.function == "lazyfault"}
    files = {f: (solution / f).read_text() for f in student_files(solution, "lazy")}
    assert fault in files and LAZY_FAULT in files[fault]
    return files, fault


def variant(starter: Path, work: Path, name: str, files: dict[str, str]) -> Path:
    """A clone of the starter with `files` (path -> text) changed and committed."""
    tree = work / name
    subprocess.run(["git", "clone", "-q", str(starter), str(tree)], check=True)
    for path, text in files.items():
        (tree / path).write_text(text)
    git(tree, "commit", "-qam", f"{name}'s work")
    return tree


@pytest.fixture(scope="module")
def solution(tmp_path_factory) -> Path:
    """A snapshot of this checkout's tracked files as the solution checkout: the batch's
    reference (its starter tree) must not change while the test runs, whatever else is
    edited in the checkout meanwhile."""
    _, regions = collect_regions(REPO, source_files(REPO))
    if not regions:
        pytest.skip(BY_DESIGN + "this checkout is a starter tree: it has no solution regions")
    src = tmp_path_factory.mktemp("solution")
    for f in source_files(REPO):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    git(src, "add", "-A")
    return src


@pytest.fixture(scope="module")
def submissions(solution, tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """SUBMISSIONS/ with 9 students, what each one is, and the solution checkout."""
    work = tmp_path_factory.mktemp("class")
    starter = make_starter(solution, "lazy", work / "starter").out
    solved, fault = lazy_solution(solution)
    grader = (starter / "harness/nexos/course/grade.py").read_text()
    fake_grader = grader.replace("    v = parse_test_verdict(output)\n",
                                 "    return True, 'ALL TESTS PASSED'\n"
                                 "    v = parse_test_verdict(output)\n")
    assert fake_grader != grader
    trees = {
        "solution": variant(starter, work, "solution", solved),
        "starter": starter,
        "hang": variant(starter, work, "hang", {**solved, fault: solved[fault].replace(
            LAZY_FAULT, HANG + LAZY_FAULT)}),
        "panic": variant(starter, work, "panic", {**solved, fault: solved[fault].replace(
            LAZY_FAULT, '  panic("lazyfault: student bug");\n')}),
        "nobuild": variant(starter, work, "nobuild", {
            **solved, fault: solved[fault] + "\nthis is not C;\n"}),
        "tests": variant(starter, work, "tests", {"user/tests/lazytests.c": ALWAYS_PASSES}),
        "grader": variant(starter, work, "grader", {"harness/nexos/course/grade.py": fake_grader}),
    }
    students = {  # student -> (kind, form)
        "alice": ("solution", as_folder), "bob": ("solution", as_zip),
        "carol": ("solution", as_bundle), "dave": ("starter", as_folder),
        "grace": ("hang", as_folder), "heidi": ("panic", as_zip),
        "ivan": ("nobuild", as_folder), "judy": ("tests", as_bundle),
        "mallory": ("grader", as_folder),
    }
    subs = work / "submissions"
    subs.mkdir()
    for student, (kind, form) in students.items():
        form(trees[kind], subs / student)
    return subs, {s: kind for s, (kind, _) in students.items()}, solution


def batch(subs: Path, src: Path, out: Path, *extra: str, plan: list[str] = PLAN,
          wait: bool = True, timeout: str = TIMEOUT,
          ) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
    """`nexos lab batch` (two jobs unless `extra` says otherwise, each submission limited
    to `timeout` seconds); its result, or with `wait` false the running process
    (finished() waits for it)."""
    # as on a checkout set up by scripts/setup.sh: the model file only in build/assets/
    env = {k: v for k, v in os.environ.items() if k not in ("NEXOS_REPO", "NEXOS_GGUF")}
    p = subprocess.Popen([sys.executable, "-m", "nexos", "lab", "batch", *plan, str(subs),
                          "--out", str(out), "--jobs", "2", "--timeout", timeout,
                          "--source", str(src), *extra],
                         cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    return finished(p) if wait else p


def finished(p: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = p.communicate(timeout=3000)
    assert p.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)


def merge(folders: list[Path], out: Path) -> list[dict[str, str]]:
    p = subprocess.run([sys.executable, "-m", "nexos", "lab", "batch-merge",
                        *map(str, folders), "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


# kind -> (status, lazytests points, cowtests points)
EXPECTED = {"solution": ("graded", "15", "15"), "starter": ("graded", "0", "15"),
            "tests": ("graded", "0", "15"), "grader": ("graded", "0", "15"),
            "hang": ("timeout", "0", "0"), "nobuild": ("build-failed", "0", "0")}


@pytest.mark.long
@pytest.mark.qemu
def test_sharded_batch_equals_the_unsharded_one_and_reruns_grade_nothing(submissions,
                                                                        tmp_path):
    """Each submission is graded once, in its shard (the three side by side, as on three
    machines); the shards' results gathered into one folder are the whole class's: an
    unsharded run over it grades nothing, and its gradebook is the merged shards' byte for
    byte."""
    subs, kinds, src = submissions
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    # the shard with the hanging submission grades two at a time: the others need not wait
    # out its limit (the jobs are no input of a grade)
    hangs = [s for s, kind in kinds.items() if kind == "hang"]
    hang_shard = sorted(kinds).index(hangs[0]) % 3 + 1
    running = [batch(subs, src, d, "--shard", f"{i}/3", "--jobs",
                     "2" if i == hang_shard else "1", wait=False)
               for i, d in enumerate(shards, 1)]
    for p in running:
        finished(p)
    whole = tmp_path / "whole"
    whole.mkdir()
    for d in shards:
        for f in d.iterdir():
            if f.is_file() and not f.name.startswith("manifest"):
                shutil.copy2(f, whole / f.name)
    stamps = {p.name: p.stat().st_mtime_ns for p in whole.glob("*.json")}
    again = batch(subs, src, whole)
    assert "0 graded, 9 already graded" in again.stdout, again.stdout + again.stderr
    assert not list(whole.glob(".work/pristine-*/.built"))   # nothing to grade: no build
    assert {p.name: p.stat().st_mtime_ns for p in whole.glob("*.json")
            if not p.name.startswith("manifest")} == stamps
    book = merge([whole], tmp_path / "book-whole")
    assert merge(shards, tmp_path / "book-shards") == book
    assert (tmp_path / "book-whole/grades.csv").read_bytes() == (
        tmp_path / "book-shards/grades.csv").read_bytes()

    parts = [json.loads((d / f"manifest-{i}-of-3.json").read_text())["students"]
             for i, d in enumerate(shards, 1)]
    assert sorted(s for p in parts for s in p) == sorted(kinds)  # a partition of the class
    assert all(p for p in parts)

    rows = {r["student"]: r for r in book}
    assert set(rows) == set(kinds)
    for student, kind in kinds.items():
        r = rows[student]
        got = (r["status"], r[f"{CFG} lazytests"], r[f"{CFG} cowtests"])
        if kind == "panic":
            assert r["status"] == "graded" and r[f"{CFG} lazytests"] == "0", r
            record = json.loads((whole / f"{student}.json").read_text())
            lazy = next(c for c in record["checks"] if c["name"] == "lazytests")
            assert "panic" in lazy["message"] + lazy["evidence"], lazy
        else:
            assert got == EXPECTED[kind], (student, r)
        assert r["max"] == "30"
    hang = json.loads((whole / "grace.json").read_text())
    assert all(f"time limit ({TIMEOUT} s)" in c["message"] for c in hang["checks"]), hang
    nobuild = json.loads((whole / "ivan.json").read_text())
    fault = Path(lazy_solution(src)[1]).name   # the file the nobuild submission broke
    assert any(c["name"] == "build" and fault in c["evidence"] for c in nobuild["checks"])
    junit = (whole / "alice.xml").read_text()
    assert 'name="lazytests"' in junit and "<failure" not in junit


@pytest.mark.qemu
def test_the_labs_whole_plan_grades_with_the_checkouts_model_file(solution, tmp_path):
    """The lab's whole plan in one configuration, as a teaching assistant runs it: its
    smolprobe checks need the LLM image, which the pristine starter copy builds from the
    model file this checkout's scripts/setup.sh fetched (no NEXOS_GGUF)."""
    starter = make_starter(solution, "lazy", tmp_path / "starter").out
    solved = variant(starter, tmp_path, "solved", lazy_solution(solution)[0])
    subs = tmp_path / "subs"
    subs.mkdir()
    as_folder(solved, subs / "alice")
    out = tmp_path / "out"
    # The whole plan builds the LLM image and runs usertests and smolprobe: minutes on a
    # loaded machine, so the limit is the checks' own order, not the hang tests' minute.
    batch(subs, solution, out, plan=["--lab", "lazy", "--configs", CFG], timeout="900")
    record = json.loads((out / "alice.json").read_text())
    assert record["status"] == "graded", record
    checks = {c["name"]: c for c in record["checks"]}
    assert {"smolprobe-numbers", "smolprobe-verdict", "lazytests", "usertests"} <= set(checks)
    assert all(c["passed"] for c in checks.values()), checks
    assert record["points"] == record["max_points"] > 0, record


def test_shards_are_a_deterministic_partition(tmp_path):
    for name in ("b", "a.zip", "d.bundle", "c"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("x")
    items = list_submissions(tmp_path)
    assert [s for s, _ in items] == ["a", "b", "c", "d"]
    assert [[s for s, _ in shard_of(items, i, 3)] for i in (1, 2, 3)] == [
        ["a", "d"], ["b"], ["c"]]
    assert parse_shard("2/3") == (2, 3)
    r = CliRunner().invoke(lab, ["batch", "--lab", "lazy", str(tmp_path), "--out",
                                 str(tmp_path / "r"), "--shard", "4/3"])
    assert r.exit_code == 1 and "need 1 <= i <= n" in r.output


# ------------------------------------------------------------------ the worked examples

EXAMPLES = REPO / "docs/examples"


def nexos_calls(script: str) -> list[list[str]]:
    """Every `nexos lab ...` command line of a shell script (continuations joined, each
    shell or workflow variable read as 1)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    calls = []
    for line in joined.splitlines():
        m = re.search(r"(?:^|\s)(?:\S*/)?nexos (lab .*)$", line.strip())
        if m:
            text = re.sub(r"\$\{\{[^}]*\}\}|\$\{\w+\}|\$\w+", "1", m[1])
            calls.append(shlex.split(text))
    return calls


def check_calls(calls: list[list[str]], where: Path) -> set[str]:
    """Each call parsed by the real `nexos lab` subcommand (click checks every option and
    argument; nothing runs) in a folder where the folders it names exist; the
    subcommands seen."""
    seen = set()
    old = Path.cwd()
    os.chdir(where)
    try:
        for argv in calls:
            assert argv[0] == "lab" and argv[1] in lab.commands, argv
            for token in argv[2:]:
                if not token.startswith("-"):
                    (where / token).mkdir(parents=True, exist_ok=True)
            ctx = lab.commands[argv[1]].make_context(argv[1], argv[2:])
            assert ctx.params, argv
            seen.add(argv[1])
    finally:
        os.chdir(old)
    return seen


def test_github_actions_example_shards_and_merges(tmp_path):
    wf = yaml.safe_load((EXAMPLES / "grade-class.yml").read_text())
    jobs = wf["jobs"]
    grade, merge_job = jobs["grade"], jobs["merge"]
    shards = grade["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) >= 2
    assert merge_job["needs"] == "grade" or "grade" in merge_job["needs"]
    runs = "\n".join(s.get("run", "") for j in (grade, merge_job) for s in j["steps"])
    calls = nexos_calls(runs)
    assert check_calls(calls, tmp_path) == {"batch", "batch-merge"}
    shard_opt = next(c for c in calls if c[1] == "batch")
    assert "--shard" in shard_opt
    assert "${{ matrix.shard }}/" in runs


def test_slurm_example_is_an_array_of_shards(tmp_path):
    text = (EXAMPLES / "grade-class.sbatch").read_text()
    assert re.search(r"^#SBATCH --array=1-\d+", text, re.M), text
    assert "SLURM_ARRAY_TASK_ID" in text and "SLURM_ARRAY_TASK_COUNT" in text
    calls = nexos_calls(text)
    assert check_calls(calls, tmp_path) == {"batch", "batch-merge"}
    assert any("--shard" in c for c in calls)
    p = subprocess.run(["bash", "-n", str(EXAMPLES / "grade-class.sbatch")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
