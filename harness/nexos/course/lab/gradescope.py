"""A Gradescope autograder bundle for a lab, and what it runs (docs/lab.md, "Grading a course").

The zip holds setup.sh and run_autograder (Gradescope's two entry points), autograder.json
(the lab, the plan, the student files), starter/ (the pristine starter tree, as `nexos lab
make` writes it, with the reference harness and test programs) and extra-tests/ (the hidden
test programs). setup.sh runs the starter's scripts/setup.sh and builds the graded
configurations once; run_autograder calls `python -m nexos.course.lab.gradescope run ROOT` for each
submission, which always writes ROOT/results/results.json in Gradescope's format.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexos.course.lab.gradetree import GradeSpec, Outcome, failed_outcome, grade_tree
from nexos.course.lab.starter import make_starter
from nexos.course.lab.submission import PreparedTree, SubmissionError, prepare_tree, student_files
from nexos.machine.config import BuildConfig, host_cores
from nexos.records import CheckResult

MANIFEST = "autograder.json"
DEFAULT_TIMEOUT = 2400.0  # seconds per submission; the assignment's own limit must be above it
HIDDEN_VISIBILITY = "after_published"

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (docs/lab.md,
# "Grading a course"): the starter tree's own setup (cross compiler, QEMU, .venv, the model
# asset), then one build of the graded configurations in the pristine tree, so that grading
# a submission only recompiles the student's files and fetches nothing.
# NEXOS_AUTOGRADER_SKIP_SETUP=1 skips the first step; NEXOS_AUTOGRADER_PYTHON names the
# Python (default: the starter's .venv).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "${NEXOS_AUTOGRADER_SKIP_SETUP:-0}" != 1 ]; then
  bash "$here/starter/scripts/setup.sh"
fi
python="${NEXOS_AUTOGRADER_PYTHON:-$here/starter/.venv/bin/python}"
PYTHONPATH="$here/starter/harness" "$python" -m nexos.course.lab.gradescope prepare "$here"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this once per submission (docs/lab.md, "Grading a course"). The student's
# upload is in $AUTOGRADER_ROOT/submission (default /autograder); the result goes to
# $AUTOGRADER_ROOT/results/results.json, written even when everything else fails.
root="${AUTOGRADER_ROOT:-/autograder}"
src="$root/source"
python="${NEXOS_AUTOGRADER_PYTHON:-$src/starter/.venv/bin/python}"
mkdir -p "$root/results"
PYTHONPATH="$src/starter/harness" "$python" -m nexos.course.lab.gradescope run "$root"
if [ ! -s "$root/results/results.json" ]; then
  echo '{"score": 0, "execution_time": 0, "tests": [],' \\
       '"output": "The autograder could not start; nothing was graded."}' \\
       > "$root/results/results.json"
fi
exit 0
"""


class BundleError(ValueError):
    """The bundle cannot be made (bad extra tests, bad options); one line says why."""


@dataclass(frozen=True)
class Manifest:
    """autograder.json: what run_autograder grades."""

    spec: GradeSpec              # hidden paths relative to the bundle's root
    student_files: tuple[str, ...]
    timeout: float
    starter_commit: str
    reference: str               # hash of everything that decides a grade but the submission

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "spec": self.spec.to_json(),
                "student_files": list(self.student_files), "timeout": self.timeout,
                "starter_commit": self.starter_commit, "reference": self.reference}

    @staticmethod
    def load(source: Path) -> Manifest:
        d = json.loads((source / MANIFEST).read_text())
        s = d["spec"]
        hidden = tuple(str(source / h) for h in s["hidden"])  # absolute where it runs
        spec = GradeSpec(s["lab"], tuple(s["configs"]),
                         None if s["checks"] is None else tuple(s["checks"]), hidden,
                         s["timeout_scale"])
        return Manifest(spec, tuple(d["student_files"]), d["timeout"], d["starter_commit"],
                        d["reference"])


def reference_hash(starter_commit: str, spec: GradeSpec, names: list[str],
                   extra: dict[str, bytes]) -> str:
    """One hash of the reference side of a grade: the starter tree (its commit is a hash of
    its sources), the plan, the student files and the hidden tests' bytes."""
    h = hashlib.sha256(json.dumps([starter_commit, spec.to_json(), names],
                                  sort_keys=True).encode())
    for name, data in sorted(extra.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def extra_tests(d: Path | None) -> dict[str, bytes]:
    """name.c -> bytes of every hidden test program in d (none without d)."""
    if d is None:
        return {}
    found = {p.name: p.read_bytes() for p in sorted(d.glob("*.c")) if p.is_file()}
    if not found:
        raise BundleError(f"--extra-tests {d}: no .c files in it")
    return found


def _add(z: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def _add_tree(z: zipfile.ZipFile, tree: Path, prefix: str) -> None:
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree)
        if rel.parts[0] == ".git" or not p.is_file() or p.is_symlink():
            continue
        _add(z, f"{prefix}/{rel.as_posix()}", p.read_bytes(), p.stat().st_mode & 0o777)


def build_bundle(src: Path, spec: GradeSpec, out: Path, extra_dir: Path | None = None,
                 extra_student_files: tuple[str, ...] = (), timeout: float = DEFAULT_TIMEOUT
                 ) -> tuple[Manifest, list[tuple[str, str, int]]]:
    """Write the autograder zip for spec.lab from the solution checkout src; the manifest
    and the planned (configuration, check, points)."""
    extra = extra_tests(extra_dir)
    hidden = tuple(f"extra-tests/{n}" for n in extra)
    names = student_files(src, spec.lab, extra_student_files)
    with tempfile.TemporaryDirectory(prefix="nexos-gradescope-") as tmp:
        starter = make_starter(src, spec.lab, Path(tmp) / "starter")
        for n, data in extra.items():  # the plan's checks need the files where they are named
            (Path(tmp) / "extra-tests").mkdir(exist_ok=True)
            (Path(tmp) / "extra-tests" / n).write_bytes(data)
        try:  # a hidden test's name must not clash with a check's
            planned = GradeSpec(spec.lab, spec.configs, spec.checks,
                                tuple(str(Path(tmp) / h) for h in hidden)).planned()
        except ValueError as e:
            raise BundleError(f"--extra-tests: {e}") from None
        full = GradeSpec(spec.lab, spec.configs, spec.checks, hidden, spec.timeout_scale)
        manifest = Manifest(full, tuple(names), timeout, starter.commit,
                            reference_hash(starter.commit, full, names, extra))
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w") as z:
            _add(z, "setup.sh", SETUP_SH.encode(), 0o755)
            _add(z, "run_autograder", RUN_AUTOGRADER.encode(), 0o755)
            _add(z, MANIFEST, (json.dumps(manifest.to_json(), indent=2) + "\n").encode(), 0o644)
            _add_tree(z, starter.out, "starter")
            for n, data in extra.items():
                _add(z, f"extra-tests/{n}", data, 0o644)
    return manifest, planned


# ------------------------------------------------------------------ inside the bundle

def prepare(source: Path) -> None:
    """setup.sh's second step: build the graded configurations in the pristine tree (a
    small or swap check boots the same build with less RAM: grade.py)."""
    from nexos.machine.build import build_all

    m = Manifest.load(source)
    starter = source / "starter"
    cfgs = [BuildConfig.parse(n) for n in m.spec.config_names()]
    built = build_all(starter, cfgs, llm=any(c.llm for c in _specs(m.spec)))
    bad = [b for b in built if not b.ok]
    if bad:
        raise SystemExit(f"setup: the pristine starter tree does not build: {bad[0].last_error}")
    print(f"setup: built {', '.join(c.folder for c in cfgs)} in {starter}")


def _specs(spec: GradeSpec) -> list[Any]:
    from nexos.course.grade import select_checks

    return [c for _, names in spec.plan() for c in select_checks(names)]


def test_entry(r: CheckResult, hidden: set[str]) -> dict[str, Any]:
    """One Gradescope test: one check in one configuration, its points and its evidence."""
    text = r.message if not r.evidence else f"{r.message}\n\n{r.evidence}"
    return {"name": f"{r.config} {r.name}", "score": r.points, "max_score": r.max_points,
            "status": "passed" if r.passed else "failed", "output": text,
            "visibility": HIDDEN_VISIBILITY if r.name in hidden else "visible"}


def results_json(outcome: Outcome, summary: str) -> dict[str, Any]:
    """Gradescope's results.json for one graded submission."""
    hidden = set(outcome.hidden)
    return {"score": outcome.points, "execution_time": int(round(outcome.seconds)),
            "output": summary, "tests": [test_entry(r, hidden) for r in outcome.results]}


def summary_text(m: Manifest, outcome: Outcome, prepared: PreparedTree | None) -> str:
    lines = [f"NexOS {m.spec.lab} lab: {outcome.points}/{outcome.max_points} points "
             f"({outcome.status})."]
    if prepared is not None:
        lines.append("Graded from your submission: " + (", ".join(prepared.copied) or "none")
                     + "; every other file is the starter tree's.")
        if prepared.missing:
            lines.append("Not in your submission (the starter's version was used): "
                         + ", ".join(prepared.missing))
    if outcome.output:
        lines.append(outcome.output)
    return "\n".join(lines)


def run(root: Path) -> dict[str, Any]:
    """Grade root/submission and write root/results/results.json; never raises."""
    t0 = time.monotonic()
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    m: Manifest | None = None
    try:
        m = Manifest.load(root / "source")
        work = root / "work"
        try:
            prepared = prepare_tree(root / "source" / "starter", root / "submission",
                                    m.student_files, work)
        except SubmissionError as e:
            outcome = failed_outcome(m.spec, "unreadable", str(e), time.monotonic() - t0)
            data = results_json(outcome, summary_text(m, outcome, None))
        else:
            outcome = grade_tree(prepared.tree, m.spec, sys.executable, m.timeout,
                                 work / "grade", host_cores(), started=t0)
            data = results_json(outcome, summary_text(m, outcome, prepared))
            shutil.rmtree(prepared.tree, ignore_errors=True)
    except Exception as e:  # the autograder must leave a result whatever happened
        why = f"the autograder failed: {type(e).__name__}: {e}"
        traceback.print_exc()
        if m is not None:
            outcome = failed_outcome(m.spec, "error", why, time.monotonic() - t0)
            data = results_json(outcome, summary_text(m, outcome, None))
        else:
            data = {"score": 0, "execution_time": int(time.monotonic() - t0),
                    "output": why, "tests": []}
    results.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{results}: {data['score']} points")
    return data


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("prepare", "run"):
        print("usage: python -m nexos.course.lab.gradescope prepare SOURCE | run ROOT",
              file=sys.stderr)
        return 2
    if argv[0] == "prepare":
        prepare(Path(argv[1]).resolve())
    else:
        run(Path(argv[1]).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
