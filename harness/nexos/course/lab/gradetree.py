"""Grade one prepared tree with `nexos grade` in a child process, and turn whatever happens
(a grade, a build failure, a hang past the time limit, a crash of the grader) into one
Outcome with a result for every planned check (docs/lab.md, "Grading a course").

The grade runs in its own process group with the tree's own harness (the pristine copy's:
the student's harness is never taken), so a hang is ended as a whole and nothing the student
wrote runs on the host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nexos.course.grade import hidden_checks, select_checks, with_hidden
from nexos.course.lab.plan import lab_plan, labs_of
from nexos.machine.config import matrix
from nexos.records import CheckResult

EVIDENCE_CHARS = 3000


@dataclass(frozen=True)
class GradeSpec:
    """What grading a submission runs: a lab's plan, narrowed to some configurations and
    (optionally) some checks, plus hidden test programs (`FILE.c[:POINTS]`)."""

    lab: str
    configs: tuple[str, ...] = ()             # empty: all four
    checks: tuple[str, ...] | None = None     # None: every check of the lab's plan
    hidden: tuple[str, ...] = ()
    timeout_scale: float = 1.0

    def __post_init__(self) -> None:
        labs_of(self.lab)  # LabError for an unknown lab
        known = {c.name for c in matrix()}
        bad = [c for c in self.configs if c not in known]
        if bad:
            raise ValueError(f"unknown configuration(s) {', '.join(bad)}; "
                             f"known: {', '.join(sorted(known))}")
        if self.checks is not None:
            select_checks(self.checks)  # ValueError naming an unknown check

    def config_names(self) -> list[str]:
        return [c.name for c in matrix() if not self.configs or c.name in self.configs]

    def plan(self) -> list[tuple[str, list[str]]]:
        """(configuration, built-in check names) in grade order."""
        wanted = set(self.config_names())
        return [(cfg.name, [n for n in names if self.checks is None or n in self.checks])
                for cfg, names in lab_plan(self.lab) if cfg.name in wanted]

    def hidden_names(self) -> list[str]:
        return [s.name for s in hidden_checks(self.hidden)[1]]

    def planned(self) -> list[tuple[str, str, int]]:
        """(configuration, check, points) of every check grading runs, hidden ones included."""
        _, hidden = hidden_checks(self.hidden)
        return [(cfg, c.name, c.points) for cfg, names in self.plan()
                for c in with_hidden(select_checks(names), hidden)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Outcome:
    """One submission's grade: status is graded, build-failed, timeout, unreadable or
    error; results has one entry per planned check (and one per failed build)."""

    status: str
    results: list[CheckResult]
    seconds: float
    output: str = ""                 # what a student reads about the whole submission
    hidden: list[str] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(r.points for r in self.results)

    @property
    def max_points(self) -> int:
        return sum(r.max_points for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "points": self.points, "max_points": self.max_points,
                "seconds": round(self.seconds, 1), "output": self.output,
                "hidden": self.hidden, "checks": [asdict(r) for r in self.results]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Outcome:
        return Outcome(d["status"], [CheckResult(**r) for r in d["checks"]], d["seconds"],
                       d.get("output", ""), list(d.get("hidden", [])))


def grade_commands(python: str, spec: GradeSpec, out: Path, jobs: int = 1
                   ) -> list[tuple[list[str], Path]]:
    """The `nexos grade` runs for spec and the JSON file each writes: one `--lab` run of
    `jobs` configurations at a time, or with checks narrowed one `--checks` run per
    configuration (plans differ by config)."""
    base = [python, "-m", "nexos", "grade", "--timeout-scale", str(spec.timeout_scale),
            "--jobs", str(jobs)]
    for h in spec.hidden:
        base += ["--hidden", h]
    if spec.checks is None:
        report = out / "grade.json"
        return [([*base, "--lab", spec.lab, "--configs", ",".join(spec.config_names()),
                  "--json", str(report)], report)]
    runs = []
    for cfg, names in spec.plan():
        if names or spec.hidden:
            report = out / f"grade-{cfg}.json"
            runs.append(([*base, "--configs", cfg, "--checks", ",".join(names),
                          "--json", str(report)], report))
    return runs


def _env(tree: Path) -> dict[str, str]:
    """The grade's environment: the tree's own harness and checkout, nothing of the caller's."""
    env = {k: v for k, v in os.environ.items() if k not in ("NEXOS_REPO", "PYTHONPATH")}
    env.update(NEXOS_REPO=str(tree), PYTHONPATH=str(tree / "harness"), COLUMNS="120")
    return env


def _run(argv: list[str], tree: Path, log: Path, deadline: float) -> str | None:
    """Run one grade; None when it finished, else why not ('timeout')."""
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        proc = subprocess.Popen(argv, cwd=tree, env=_env(tree), stdout=f, stderr=f,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the grade, its make and its QEMUs
            proc.wait()
            return "timeout"
    return None


def _tail(log: Path, chars: int = EVIDENCE_CHARS) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def not_graded(spec: GradeSpec, results: list[CheckResult], why: str, evidence: str = ""
               ) -> list[CheckResult]:
    """results plus a failed, zero-point result for every planned check they lack."""
    have = {(r.config, r.name) for r in results}
    fill = [CheckResult(cfg, name, False, 0, pts, 0.0, f"not graded: {why}", evidence)
            for cfg, name, pts in spec.planned() if (cfg, name) not in have]
    return results + fill


def grade_tree(tree: Path, spec: GradeSpec, python: str, timeout: float, out: Path,
               jobs: int = 1, started: float | None = None) -> Outcome:
    """Grade tree (prepared by submission.prepare_tree) within `timeout` seconds in all
    from `started` (time.monotonic(), when the submission's grading began, e.g. before its
    tree was prepared; now by default), `jobs` configurations at a time."""
    t0 = time.monotonic() if started is None else started
    out.mkdir(parents=True, exist_ok=True)
    log = out / "grade.log"
    log.unlink(missing_ok=True)
    results: list[CheckResult] = []
    status, why = "graded", ""
    for argv, report in grade_commands(python, spec, out, jobs):
        report.unlink(missing_ok=True)
        if _run(argv, tree, log, t0 + timeout) == "timeout":
            status, why = "timeout", f"grading stopped at the time limit ({timeout:.0f} s)"
            break
        try:
            results += [CheckResult(**r) for r in json.loads(report.read_text())["checks"]]
        except (OSError, ValueError, KeyError, TypeError):
            status, why = "error", "the grader wrote no report"
            break
    builds = [r for r in results if r.name == "build"]
    if status == "graded" and builds:
        status = "build-failed"
        why = "the build of " + ", ".join(r.config for r in builds) + " failed"
    evidence = _tail(log) if status in ("timeout", "error") else ""
    if not why:
        why = "the grade did not run this check"
    results = not_graded(spec, results, why, evidence)
    return Outcome(status, results, time.monotonic() - t0, why if status != "graded" else "",
                   spec.hidden_names())


def failed_outcome(spec: GradeSpec, status: str, why: str, seconds: float = 0.0) -> Outcome:
    """Every planned check failed for one reason (an unreadable submission, a crash)."""
    return Outcome(status, not_graded(spec, [], why), seconds, why, spec.hidden_names())
