"""`nexos grade --timeout-scale X` / NEXOS_TIMEOUT_SCALE (docs/harness.md, "Grading"):
the factor reaches every check's time limit and each session's boot and lifetime, the
option overrides the variable, 1.0 is the unscaled grade, and a bad value is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

import nexos.course.grade as grade_mod
from nexos.cli import cli
from nexos.machine.qemu import CommandResult
from support import copy_checkout

# The unscaled limits, seconds: what a grade without a scale has always used.
UNSCALED = {"usertests -q": 600.0, "lazytests": 600.0, "cowtests": 600.0}
BOOT, LIFETIME = 120.0, 7200.0


class FakeSession:
    """Stands in for QemuSession inside grade.py: records how it was made and each run."""

    made: list[dict[str, object]] = []
    runs: list[tuple[str, float]] = []

    def __init__(self, **kwargs: object) -> None:
        FakeSession.made.append(kwargs)
        self.alive = True

    @classmethod
    def for_config(cls, config, repo, llm=False, **kwargs):
        return cls(**kwargs)

    def start(self) -> FakeSession:
        return self

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        FakeSession.runs.append((cmd, timeout))
        return CommandResult(cmd, "test x: OK\nALL TESTS PASSED\n", 0.0)

    def close(self) -> None:
        self.alive = False


@pytest.fixture
def graded(repo, monkeypatch):
    """graded(*args, env=None) -> ({command: timeout}, the sessions' kwargs) of a
    `nexos grade --no-build --configs lazy1-cow1 ARGS` whose sessions are fakes."""
    monkeypatch.setattr(grade_mod, "QemuSession", FakeSession)
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    monkeypatch.delenv("NEXOS_TIMEOUT_SCALE", raising=False)

    def run(*args: str, env: dict[str, str] | None = None):
        FakeSession.made, FakeSession.runs = [], []
        r = CliRunner().invoke(cli, ["grade", "--no-build", "--configs", "lazy1-cow1", *args],
                               env=env)
        # every fake run passes a test program; a plan's smolprobe checks fail on its output
        assert r.exit_code in (0, 1) and "Traceback" not in r.output, r.output
        return dict(FakeSession.runs), FakeSession.made
    return run


CHECKS = ("--checks", "usertests,lazytests,cowtests")


def scaled(factor: float) -> dict[str, float]:
    return {cmd: t * factor for cmd, t in UNSCALED.items()}


def test_no_scale_is_the_unscaled_grade(graded):
    timeouts, made = graded(*CHECKS)
    assert timeouts == UNSCALED
    # two sessions: the configuration's (usertests) and the small checks' machine
    assert [(m["boot_timeout"], m["lifetime"]) for m in made] == [(BOOT, LIFETIME)] * 2


def test_the_option_scales_every_limit(graded):
    timeouts, made = graded(*CHECKS, "--timeout-scale", "2.5")
    assert timeouts == scaled(2.5)
    assert [(m["boot_timeout"], m["lifetime"]) for m in made] == [
        (BOOT * 2.5, LIFETIME * 2.5)] * 2


def test_the_variable_scales_and_the_option_overrides_it(graded):
    timeouts, made = graded(*CHECKS, env={"NEXOS_TIMEOUT_SCALE": "3"})
    assert timeouts == scaled(3) and made[0]["boot_timeout"] == BOOT * 3
    timeouts, made = graded(*CHECKS, "--timeout-scale", "0.5", env={"NEXOS_TIMEOUT_SCALE": "3"})
    assert timeouts == scaled(0.5) and made[0]["boot_timeout"] == BOOT * 0.5
    # a bad variable does not matter when the option is given
    timeouts, _ = graded(*CHECKS, "--timeout-scale", "2", env={"NEXOS_TIMEOUT_SCALE": "x"})
    assert timeouts == scaled(2)


def test_a_lab_plan_is_scaled_too(graded):
    timeouts, made = graded("--lab", "lazy", "--timeout-scale", "4")
    assert timeouts["usertests -q"] == 600 * 4 and timeouts["lazytests"] == 600 * 4
    assert all(m["boot_timeout"] == BOOT * 4 for m in made)


BAD = ["abc", "0", "-2", "nan", "inf", ""]


@pytest.mark.parametrize("where,value", [("option", v) for v in BAD]
                         + [("variable", v) for v in BAD if v])  # "" is unset to click
def test_a_bad_scale_is_one_line(repo, monkeypatch, where, value):
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    if where == "option":
        r = CliRunner().invoke(cli, ["grade", "--no-build", "--timeout-scale", value])
        name = "--timeout-scale"
    else:
        r = CliRunner().invoke(cli, ["grade", "--no-build"], env={"NEXOS_TIMEOUT_SCALE": value})
        name = "NEXOS_TIMEOUT_SCALE"
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    kind = "number" if value in ("abc", "") else "positive number"
    assert lines[0].startswith(f"nexos: error: {name}: {value!r} is not a {kind} ("), lines


HANG = """#include "kernel/types.h"
#include "user/user.h"
int main(void) { printf("hang: sleeping for ever\\n"); for (;;) sleep(1000); }
"""
OK = """#include "kernel/types.h"
#include "user/user.h"
int main(void) { printf("test fine: OK\\nALL TESTS PASSED\\n"); exit(0); }
"""


@pytest.mark.qemu
def test_a_real_grade_times_out_at_the_scaled_limit(tmp_path):
    """A hidden check that never ends (600 s unscaled) fails at 600 x 0.02 = 12 s, and the
    check after it still runs on a fresh boot (booted within 120 x 0.02 = 2.4 s). In a copy
    of the checkout: the hidden programs go onto the image of the configuration's build
    folder, which the other tests boot (make rebuilds it for EXTRA_UPROGS)."""
    hang, fine = tmp_path / "hang.c", tmp_path / "fine.c"
    hang.write_text(HANG)
    fine.write_text(OK)
    junit = tmp_path / "grade.xml"
    tree = copy_checkout(tmp_path, share_models=True)
    env = {**os.environ, "NEXOS_REPO": str(tree), "NEXOS_TIMEOUT_SCALE": "not a number"}
    p = subprocess.run([sys.executable, "-m", "nexos", "grade", "--configs", "lazy1-cow1",
                        "--checks", "", "--hidden", str(hang), "--hidden", str(fine),
                        "--timeout-scale", "0.02", "--junit", str(junit)],
                       cwd=tree, env=env, text=True, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    assert p.returncode == 1, p.stdout + p.stderr
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {"hang", "fine"}
    failure = cases["hang"].find("failure")
    assert failure is not None
    assert "timeout after 12s waiting for `hang` to finish" in failure.get("message", ""), \
        failure.get("message")
    fine_failure = cases["fine"].find("failure")
    assert fine_failure is None, fine_failure.get("message")
