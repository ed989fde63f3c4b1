"""A build that fails inside `nexos grade`, `compare` or `serve` says why in make's own words:
in a copy of the checkout that has no model asset (as on a machine where setup did not run),
each names the missing GGUF and the command that fetches it. Nothing boots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nexos.machine.build import last_error_line
from nexos.model.tokenizer import GGUF_ENV
from support import copy_checkout

MISSING = ("make: no SmolLM2-135M-Instruct.Q4_1.gguf in build/assets/: bash scripts/setup.sh "
           f"fetches it (or set {GGUF_ENV}=FILE)")


@pytest.fixture(scope="module")
def bare_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's tracked files, without build/ (no model asset, no checkpoint)."""
    return copy_checkout(tmp_path_factory.mktemp("no-asset"))


def nexos(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NEXOS_REPO", GGUF_ENV)}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "nexos", *args], cwd=tree, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=600)


def test_grade_table_shows_makes_last_error_line(bare_tree, tmp_path):
    js = tmp_path / "grade.json"
    r = nexos(bare_tree, "grade", "--configs", "lazy0-cow0,lazy1-cow1", "--checks",
              "smolprobe-numbers", "--json", str(js))
    assert r.returncode == 1, r.stdout + r.stderr
    checks = json.loads(js.read_text())["checks"]
    assert [(c["config"], c["name"], c["passed"], c["message"]) for c in checks] == [
        ("lazy0-cow0", "build", False, MISSING), ("lazy1-cow1", "build", False, MISSING)]
    rows = [ln for ln in r.stdout.splitlines() if " build " in ln]
    assert len(rows) == 2 and all("no SmolLM2-135M-Instruct.Q4_1.gguf in build/assets/"
                                  in row for row in rows), r.stdout
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("command", [["compare"], ["serve"]])
def test_compare_and_serve_end_on_makes_last_error_line(bare_tree, command):
    r = nexos(bare_tree, *command)
    assert r.returncode == 1, r.stdout + r.stderr
    lazy = "lazy1-cow0" if command == ["compare"] else "lazy1-cow1"  # their default kernels
    last = r.stderr.strip().splitlines()[-1]
    assert last == f"nexos: error: build failed for lazy0-cow0, {lazy}: {MISSING}", r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_last_error_line_picks_the_cause():
    """make's recipe summary and folder notes are not causes; a compiler's error is."""
    out = ("gcc -c kernel/vm.c\nkernel/vm.c:12:3: error: expected ';' before 'return'\n"
           "   12 | x\n      | ^\nmake[1]: Leaving directory '/x'\n"
           "make: *** [Makefile:80: build/x.o] Error 1\n")
    assert last_error_line(out) == "kernel/vm.c:12:3: error: expected ';' before 'return'"
    assert last_error_line("Makefile:31: *** LAZY_ALLOC must be 0 or 1, not '2'.  Stop.\n") \
        == "Makefile:31: *** LAZY_ALLOC must be 0 or 1, not '2'.  Stop."
    assert last_error_line("EXTRA_UPROGS: no such file: a.c\nmake: *** [x] Error 1\n") \
        == "EXTRA_UPROGS: no such file: a.c"
