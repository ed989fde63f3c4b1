"""`nexos grade --jobs N` (docs/harness.md, "Grading"): N configurations are graded at once,
each in its own sessions, and the results still come back in the plan's order (sessions
faked: each run waits until another configuration's run has started, or 0.3 s)."""

from __future__ import annotations

import json
import threading

from click.testing import CliRunner

import nexos.course.grade as grade_mod
from nexos.cli import cli
from nexos.machine.qemu import CommandResult

CONFIGS = "lazy0-cow0,lazy0-cow1,lazy1-cow0,lazy1-cow1"


class OverlapSession:
    """A stand-in for QemuSession that records which configurations were running at once."""

    lock = threading.Lock()
    running: set[str] = set()
    overlapped: set[str] = set()
    started = threading.Event()

    def __init__(self, config: str) -> None:
        self.config, self.alive = config, True

    @classmethod
    def for_config(cls, config, repo, llm=False, **kwargs):
        return cls(config.name)

    def start(self) -> OverlapSession:
        return self

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        with self.lock:
            others = self.running - {self.config}
            if others:
                self.overlapped |= others | {self.config}
            self.running.add(self.config)
        if others:
            OverlapSession.started.set()
        else:  # give another configuration a moment to start beside this one
            OverlapSession.started.wait(0.3)
        with self.lock:
            self.running.discard(self.config)
        return CommandResult(cmd, "test x: OK\nALL TESTS PASSED\n", 0.0)

    def close(self) -> None:
        self.alive = False


def grade(monkeypatch, repo, tmp_path, jobs: str) -> tuple[list[str], set[str]]:
    """(the configurations of the JSON's checks in order, those that ran beside another)."""
    monkeypatch.setattr(grade_mod, "QemuSession", OverlapSession)
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    OverlapSession.running, OverlapSession.overlapped = set(), set()
    OverlapSession.started = threading.Event()
    report = tmp_path / f"grade-{jobs}.json"
    r = CliRunner().invoke(cli, ["grade", "--no-build", "--configs", CONFIGS, "--checks",
                                 "usertests,lazytests", "--jobs", jobs, "--json", str(report)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    checks = json.loads(report.read_text())["checks"]
    return [f"{c['config']} {c['name']}" for c in checks], OverlapSession.overlapped


def test_two_jobs_grade_side_by_side_and_report_in_plan_order(monkeypatch, repo, tmp_path):
    order, overlapped = grade(monkeypatch, repo, tmp_path, "2")
    assert order == [f"{cfg} {check}" for cfg in CONFIGS.split(",")
                     for check in ("usertests", "lazytests")]
    assert len(overlapped) >= 2, "no two configurations were graded at once"


def test_one_job_grades_one_configuration_at_a_time(monkeypatch, repo, tmp_path):
    order, overlapped = grade(monkeypatch, repo, tmp_path, "1")
    assert len(order) == 8 and overlapped == set()


def test_jobs_must_be_a_positive_number(repo, monkeypatch):
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    r = CliRunner().invoke(cli, ["grade", "--no-build", "--jobs", "0"])
    assert r.exit_code == 2 and "--jobs" in r.output and "Traceback" not in r.output
