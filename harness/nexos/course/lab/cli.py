"""``nexos lab``: make | regions | plan | gradescope | batch | batch-merge. Wiring only; the
work is in the modules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nexos.course.lab.batch import (
    BatchError,
    list_submissions,
    make_batch,
    merge,
    parse_shard,
    run_batch,
)
from nexos.course.lab.gradescope import DEFAULT_TIMEOUT, BundleError, build_bundle
from nexos.course.lab.gradetree import GradeSpec
from nexos.course.lab.handin import handin_cmd
from nexos.course.lab.markers import MarkerError
from nexos.course.lab.plan import LAB_CHOICES, LabError, lab_checks, lab_plan
from nexos.course.lab.starter import StarterError, collect_regions, make_starter, source_files
from nexos.course.lab.submission import SubmissionError
from nexos.machine.config import ConfigError, find_repo

lab_option = click.option("--lab", "which", type=click.Choice(list(LAB_CHOICES)),
                          required=True, help="The lab: lazy, cow, mmap, swap, or all (the four).")
source_option = click.option(
    "--source", type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The solution checkout (default: the NexOS checkout around the working directory).")


def _source(source: Path | None) -> Path:
    """--source, else the NexOS checkout around the working directory."""
    return source or find_repo()


class LabGroup(click.Group):
    """The ``lab`` group: an unsound marker (MarkerError ``<file>:<line>: <why>``), a
    refused starter tree (StarterError) or no checkout (ConfigError) from any of its
    commands becomes one ClickException: one line ``nexos: error: ...``, exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (MarkerError, StarterError, ConfigError, BundleError, SubmissionError,
                LabError, BatchError) as e:
            raise click.ClickException(str(e)) from None


@click.group("lab", cls=LabGroup)
def lab() -> None:
    """The lab kit: starter trees for the lazy-allocation, copy-on-write, mmap and swap
    labs, and the checks that grade them (docs/lab.md)."""


@lab.command("make")
@lab_option
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="A new or empty directory for the starter tree.")
@source_option
def make_cmd(which: str, out: Path, source: Path | None) -> None:
    """Write a starter tree: the checkout with the lab's solution regions replaced by their
    stubs, plus LAB.md, as a git repository with one commit. Refuses unsound markers, a
    non-empty OUT, and any solution line left in the tree."""
    tree = make_starter(_source(source), which, out)
    spots = ", ".join(f"{r.path}:{r.function or r.begin}" for r in tree.regions)
    click.echo(f"wrote {tree.out}: {tree.files} files, {len(tree.regions)} regions stubbed "
               f"({spots}); commit {tree.commit[:12]}")


@lab.command("regions")
@source_option
def regions_cmd(source: Path | None) -> None:
    """List the solution regions of the checkout (and check every marker)."""
    src = _source(source)
    _, regions = collect_regions(src, source_files(src))
    for r in regions:
        stub = f"stub {len(r.stub_lines)} lines" if r.stub is not None else "no stub"
        click.echo(f"{r.lab:5} {r.path}:{r.begin}-{r.end} {r.function or '-'}() "
                   f"{len(r.solution)} lines, {stub}")
    click.echo(f"{len(regions)} regions, all markers sound")


@lab.command("plan")
@lab_option
def plan_cmd(which: str) -> None:
    """Which checks grade the lab in each configuration; `*` marks a lab check (it fails in
    the starter tree), the others are non-lab checks (a starter tree passes them)."""
    for cfg, names in lab_plan(which):
        mine = set(lab_checks(which, cfg))
        click.echo(f"{cfg.name}: " + " ".join(f"{n}{'*' if n in mine else ''}" for n in names))


# ------------------------------------------------------------------ grading a course

def _names(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(x for x in value.replace(",", " ").split() if x)


def grade_spec_options(f: Any) -> Any:
    """The options that narrow what a submission's grade runs (docs/lab.md, "Grading a
    course"); the default is the lab's whole plan."""
    for opt in reversed([
        click.option("--configs", default=None, metavar="A,B",
                     help="Grade only these configurations (default: all four)."),
        click.option("--checks", default=None, metavar="A,B",
                     help="Grade only these checks of the lab's plan (default: all)."),
        click.option("--extra-tests", type=click.Path(file_okay=False, exists=True,
                                                      path_type=Path),
                     help="A folder of hidden test programs (*.c), built in through "
                          "EXTRA_UPROGS and graded as hidden checks."),
        click.option("--student-file", "student_extra", multiple=True, metavar="PATH",
                     help="One more file students may change (beside the files with the "
                          "lab's regions). Repeat for more."),
        click.option("--timeout", type=click.FloatRange(1), default=DEFAULT_TIMEOUT,
                     show_default=True, help="Seconds to grade one submission in all."),
        click.option("--timeout-scale", type=click.FloatRange(0.01), default=1.0,
                     show_default=True, help="Multiply every check's time limit."),
    ]):
        f = opt(f)
    return f


def make_spec(which: str, configs: str | None, checks: str | None, hidden: tuple[str, ...],
              timeout_scale: float) -> GradeSpec:
    try:
        return GradeSpec(which, _names(configs) or (), _names(checks), hidden, timeout_scale)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@lab.command("gradescope")
@lab_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The autograder zip to write (e.g. autograder.zip).")
@grade_spec_options
@source_option
def gradescope_cmd(which: str, out: Path, configs: str | None, checks: str | None,
                   extra_tests: Path | None, student_extra: tuple[str, ...], timeout: float,
                   timeout_scale: float, source: Path | None) -> None:
    """Write a Gradescope autograder bundle: setup.sh, run_autograder, the pristine starter
    tree and the hidden tests. Each submission is graded in a fresh copy of the starter with
    only the student's files taken from it."""
    spec = make_spec(which, configs, checks, (), timeout_scale)
    try:
        m, planned = build_bundle(_source(source), spec, out, extra_tests, student_extra,
                                  timeout)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"wrote {out}: {which} lab, student files {', '.join(m.student_files)}; "
               f"{len(planned)} tests, {sum(p for *_, p in planned)} points; "
               f"starter {m.starter_commit[:12]}")


@lab.command("batch")
@lab_option
@click.argument("submissions", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", "results", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="RESULTS/: per-student JSON, JUnit and log, the manifest.")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="Submissions graded at once.")
@click.option("--shard", default="1/1", show_default=True, metavar="I/N",
              help="Grade only the I-th of N slices of the sorted students.")
@click.option("--json", "as_json", is_flag=True, help="Print the shard's manifest as JSON.")
@grade_spec_options
@source_option
def batch_cmd(which: str, submissions: Path, results: Path, jobs: int, shard: str,
              as_json: bool, configs: str | None, checks: str | None,
              extra_tests: Path | None, student_extra: tuple[str, ...], timeout: float,
              timeout_scale: float, source: Path | None) -> None:
    """Grade every submission in SUBMISSIONS (a folder, .zip or git bundle per student,
    named by student), each in a fresh copy of the starter tree with only the student's
    files from it. A rerun skips students graded from the same inputs."""
    where = parse_shard(shard)
    spec = make_spec(which, configs, checks, (), timeout_scale)
    entries = list_submissions(submissions)
    try:
        b = make_batch(_source(source), spec, results, extra_tests, student_extra, timeout)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    err = Console(stderr=True, highlight=False)

    def done(student: str, rec: dict[str, Any] | None) -> None:
        if rec is None:
            err.print(f"{student}: already graded from the same inputs")
        else:
            err.print(f"{student}: {rec['points']}/{rec['max_points']} {rec['status']} "
                      f"({rec['seconds']:.0f} s)")
    manifest = run_batch(b, entries, results, jobs, where, done)
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
    else:
        click.echo(f"shard {manifest['shard']}: {len(manifest['students'])} students, "
                   f"{len(manifest['graded'])} graded, {len(manifest['skipped'])} already "
                   f"graded; results in {results}")


@lab.command("batch-merge")
@click.argument("folders", nargs=-1, required=True,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where grades.csv and grades.json go.")
def batch_merge_cmd(folders: tuple[Path, ...], out: Path) -> None:
    """Join the RESULTS folders of `nexos lab batch` shards into one gradebook:
    grades.csv (student, points, max, status, one column per check)."""
    path = merge(list(folders), out)
    rows = path.read_text().count("\n") - 1
    click.echo(f"wrote {path}: {rows} students")


lab.add_command(handin_cmd)
