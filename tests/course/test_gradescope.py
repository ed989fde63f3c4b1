"""The Gradescope autograder bundle (docs/lab.md, "Grading a course"): `nexos lab gradescope`
writes the zip; unpacked as an autograder root, its setup.sh runs (the apt step finds the
packages installed), and run_autograder grades real submissions in real QEMU: the starter
(the lab checks and the hidden lab test fail, the rest pass), the solution (full score), a
submission whose edited test program always passes (ignored: it scores as the starter), one
that does not build and one that is no tree at all. Every results.json is checked against a
JSON Schema written from Gradescope's documented format (tests/data/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nexos.course.lab.gradescope import RUN_AUTOGRADER
from nexos.course.lab.starter import collect_regions, make_starter, source_files
from nexos.course.lab.submission import extract_zip
from support import BY_DESIGN, SMOLLM2_GGUF, path_lock, shared_dir, shared_once

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests/data/gradescope-results.schema.json").read_text())
HIDDEN = REPO / "tests/data/hidden"
CFG = "lazy1-cow0"
# The fewest checks of the lazy lab's plan in one configuration that show both kinds:
# lazytests is a lab check there, usertests (its quick subset) and cowtests non-lab checks.
CHECKS = "usertests,lazytests,cowtests"
POINTS = {"usertests": 20, "lazytests": 15, "cowtests": 15, "bigsbrk": 10}
ALWAYS_PASSES = ('#include "kernel/types.h"\n#include "user/user.h"\n'
                 'int\nmain(void)\n{\n  printf("ALL TESTS PASSED\\n");\n  exit(0);\n}\n')



def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def git(d: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(d), "-c", "user.name=student",
                           "-c", "user.email=student@nexos.invalid", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def solution_files() -> list[str]:
    _, regions = collect_regions(REPO, source_files(REPO))
    if not regions:
        pytest.skip(BY_DESIGN + "this checkout is a starter tree: it has no solution regions")
    return sorted({r.path for r in regions if r.lab == "lazy"})


def grader_env() -> dict[str, str]:
    """The machine's environment without this checkout's (no NEXOS_REPO); the model asset
    handed over as a course would (NEXOS_GGUF), so that setup fetches nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("NEXOS_REPO", "PYTHONPATH")}
    if SMOLLM2_GGUF is not None:
        env["NEXOS_GGUF"] = str(SMOLLM2_GGUF)
    else:
        env["NEXOS_NO_ASSETS"] = "1"  # this plan runs no smolprobe check
    return env


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """An autograder root: the bundle unpacked into source/ as Gradescope does, setup.sh
    run, run_autograder copied to the root; made once per test run for both pytest-xdist
    workers (grade() holds its lock while it grades)."""
    def make() -> Path:
        solution_files()
        d = shared_dir(tmp_path_factory) / "gradescope"
        d.mkdir()
        zpath = d / "autograder.zip"
        p = run([sys.executable, "-m", "nexos", "lab", "gradescope", "--lab", "lazy",
                 "--configs", CFG, "--checks", CHECKS, "--extra-tests", str(HIDDEN),
                 "--out", str(zpath), "--source", str(REPO)], REPO, grader_env())
        assert p.returncode == 0, p.stdout + p.stderr
        assert "student files kernel/fault.c, kernel/vm.c; 4 tests, 60 points" in p.stdout, p.stdout
        names = zipfile.ZipFile(zpath).namelist()
        assert {"setup.sh", "run_autograder", "autograder.json", "starter/Makefile",
                "starter/LAB.md", "extra-tests/bigsbrk.c"} <= set(names)
        assert not any(n.startswith(("starter/.git/", "starter/build/")) for n in names)
        root = d / "root"
        if shutil.which("unzip"):
            (root / "source").mkdir(parents=True)
            assert run(["unzip", "-q", str(zpath)], root / "source").returncode == 0
        else:
            extract_zip(zpath, root / "source")
        setup = run(["bash", str(root / "source/setup.sh")], root / "source", grader_env())
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        assert "Debian packages already installed" in setup.stdout, setup.stdout
        assert "fetching" not in setup.stdout and f"setup: built {CFG}" in setup.stdout
        shutil.copy2(root / "source/run_autograder", root / "run_autograder")
        return root
    return shared_once(tmp_path_factory, "gradescope-autograder", make)


def grade(root: Path, put: Any) -> dict[str, Any]:
    """Put a submission into root/submission (put(folder)), run run_autograder, and return
    its results.json after checking it against the schema; one grade at a time per root."""
    with path_lock(root.with_name(".lock-root")):
        for sub in ("submission", "results", "work"):
            shutil.rmtree(root / sub, ignore_errors=True)
        (root / "submission").mkdir()
        put(root / "submission")
        env = {**grader_env(), "AUTOGRADER_ROOT": str(root)}
        p = run([str(root / "run_autograder")], root, env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        text = (root / "results/results.json").read_text()
        assert text, ("run_autograder left an empty results.json (a full /tmp?)\n"
                      + p.stdout[-3000:] + p.stderr[-3000:])
        data = json.loads(text)
    jsonschema.validate(data, SCHEMA)
    return data


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"].removeprefix(f"{CFG} "): t for t in data["tests"]}


@pytest.fixture(scope="module")
def starter(tmp_path_factory) -> Path:
    """A student's clone of the lazy starter tree, as `nexos lab make` writes it."""
    return make_starter(REPO, "lazy", tmp_path_factory.mktemp("lab") / "starter").out


def zip_tree(tree: Path, dest: Path) -> None:
    with zipfile.ZipFile(dest, "w") as z:
        for f in git(tree, "ls-files").splitlines():
            z.write(tree / f, f"nexos-lazy/{f}")


def assert_scores_like_the_starter(data: dict[str, Any]) -> None:
    tests = by_name(data)
    assert set(tests) == set(POINTS), data["tests"]
    want = {"usertests": "passed", "lazytests": "failed", "cowtests": "passed",
            "bigsbrk": "failed"}
    assert {n: t["status"] for n, t in tests.items()} == want, data["output"]
    assert data["score"] == POINTS["usertests"] + POINTS["cowtests"] == sum(
        t["score"] for t in data["tests"])
    assert {t["max_score"] for t in data["tests"]} == set(POINTS.values())
    assert "test sparse: FAILED" in tests["lazytests"]["output"]  # the evidence
    assert "bigsbrk: FAILED sbrk" in tests["bigsbrk"]["output"]
    assert tests["bigsbrk"]["visibility"] == "after_published"
    assert {tests[n]["visibility"] for n in ("usertests", "lazytests", "cowtests")} == {
        "visible"}


@pytest.mark.qemu
def test_starter_as_a_zip_fails_the_lab_checks_only(autograder, starter, tmp_path):
    data = grade(autograder, lambda d: zip_tree(starter, d / "submission.zip"))
    assert_scores_like_the_starter(data)
    assert "Graded from your submission: kernel/fault.c, kernel/vm.c" in data["output"]


@pytest.mark.qemu
def test_solution_as_a_folder_scores_full_points(autograder, starter):
    def put(d: Path) -> None:
        shutil.copytree(starter, d / "my-lab", ignore=shutil.ignore_patterns(".git"))
        for f in solution_files():
            shutil.copyfile(REPO / f, d / "my-lab" / f)
    data = grade(autograder, put)
    assert all(t["status"] == "passed" for t in data["tests"]), data["tests"]
    assert data["score"] == sum(POINTS.values()) == sum(t["max_score"] for t in data["tests"])


@pytest.mark.qemu
def test_edited_test_program_in_a_git_bundle_is_ignored(autograder, starter, tmp_path):
    """The student makes lazytests always pass and commits it: the grade runs the
    reference lazytests, so the submission scores exactly as the starter."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(starter), str(clone)], check=True)
    (clone / "user/tests/lazytests.c").write_text(ALWAYS_PASSES)
    git(clone, "commit", "-qam", "lazytests passes now")
    bundle = tmp_path / "lab.bundle"
    git(clone, "bundle", "create", str(bundle), "HEAD", "main")
    data = grade(autograder, lambda d: shutil.copyfile(bundle, d / "lab.bundle"))
    assert_scores_like_the_starter(data)


@pytest.mark.qemu
def test_build_failure_is_reported_with_makes_error(autograder, starter):
    def put(d: Path) -> None:
        shutil.copytree(starter, d / "t", ignore=shutil.ignore_patterns(".git"))
        with open(d / "t/kernel/vm.c", "a") as f:
            f.write("\nthis is not C;\n")
    data = grade(autograder, put)
    tests = by_name(data)
    assert data["score"] == 0 and tests["build"]["status"] == "failed", data
    assert "kernel/vm.c" in tests["build"]["output"] and "error" in tests["build"]["output"]
    assert all(tests[n]["status"] == "failed" and "not graded: the build of" in
               tests[n]["output"] for n in POINTS)
    assert "build-failed" in data["output"]


@pytest.mark.qemu
def test_unreadable_submission_still_gets_a_result(autograder):
    data = grade(autograder, lambda d: (d / "notes.txt").write_text("I did the lab\n"))
    assert data["score"] == 0 and len(data["tests"]) == len(POINTS)
    assert "no NexOS tree" in data["output"] or "not a folder" in data["output"], data


def test_run_autograder_writes_a_result_when_python_cannot_start(tmp_path):
    """Even with no usable Python (a broken image), run_autograder leaves a results.json
    that Gradescope accepts, and exits 0."""
    script = tmp_path / "run_autograder"
    script.write_text(RUN_AUTOGRADER)
    (tmp_path / "submission").mkdir()
    env = {**grader_env(), "AUTOGRADER_ROOT": str(tmp_path),
           "NEXOS_AUTOGRADER_PYTHON": shutil.which("false") or "/bin/false"}
    p = run(["bash", str(script)], tmp_path, env)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads((tmp_path / "results/results.json").read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["score"] == 0 and "could not start" in data["output"]


def test_schema_refuses_what_gradescope_does_not_document():
    good = {"score": 1, "execution_time": 2, "output": "", "tests": [
        {"name": "a", "score": 1, "max_score": 1, "status": "passed", "output": "",
         "visibility": "visible"}]}
    jsonschema.validate(good, SCHEMA)
    for bad in ({**good, "tests": [{**good["tests"][0], "status": "ok"}]},
                {**good, "tests": [{**good["tests"][0], "visibility": "later"}]},
                {**good, "scores": 1}, {k: v for k, v in good.items() if k != "tests"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)
