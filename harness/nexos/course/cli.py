"""`nexos grade`: every check on every configuration (or a lab's plan), with points."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import click
from rich.markup import escape

from nexos.clikit import (
    OptionError,
    check_output_dir,
    check_output_file,
    err,
    mem_opt,
    nobuild_opt,
    out,
    repo,
    save_text,
    swap_opt,
)
from nexos.course.grade import (
    CHECK_NAMES,
    DEFAULT_CHECK_NAMES,
    Plan,
    grade_all,
    hidden_checks,
    select_checks,
    timeout_scale,
    with_hidden,
)
from nexos.course.lab.plan import LAB_CHOICES, lab_plan
from nexos.course.report import grade_json, grade_junit, grade_table
from nexos.machine.config import ALL_CONFIGS, BuildConfig, ConfigError, host_cores
from nexos.machine.toolchain import find_toolchain
from nexos.records import CheckResult

HIDDEN_MAIN_RE = re.compile(r"\bmain\s*\(")


def check_hidden_file(value: str) -> None:
    """ConfigError `<file>: <why>` unless the FILE of a `--hidden FILE.c[:POINTS]` value is
    a readable C source file (UTF-8 text) that defines main(): a missing, empty, binary or
    wrong-format file is refused here, before any build."""
    tail = value.rpartition(":")[2]
    path = Path(value.rpartition(":")[0] if tail.isdigit() else value)
    if path.suffix != ".c":
        raise ConfigError(f"{path}: not a .c file (--hidden takes a test program's C "
                          "source: FILE.c[:POINTS])")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    if not data.strip():
        raise ConfigError(f"{path}: empty file (a hidden test is a C program)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not C source (not UTF-8 text)") from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise ConfigError(f"{path}:{line}: not C source (a NUL byte)")
    if not HIDDEN_MAIN_RE.search(text):
        raise ConfigError(f"{path}: defines no main() (a hidden test is a program that "
                          "ends with ALL TESTS PASSED or SOME TESTS FAILED)")


CONFIG_NAMES = tuple(BuildConfig(lazy, cow).name for lazy, cow in ALL_CONFIGS)
EXPECTED_CONFIGS = f"expected {', '.join(CONFIG_NAMES[:-1])} or {CONFIG_NAMES[-1]}"


def scale_value(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """--timeout-scale (or NEXOS_TIMEOUT_SCALE) -> a positive factor; a one-line error
    naming where a bad value came from."""
    where = ("NEXOS_TIMEOUT_SCALE" if ctx.get_parameter_source(param.name or "")
             == click.core.ParameterSource.ENVIRONMENT else "--timeout-scale")
    try:
        return timeout_scale(value)
    except ValueError as e:
        raise OptionError(f"{where}: {e}") from None


def config_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                 ) -> list[str]:
    """--configs values -> configuration names in order, duplicates dropped. Each value is
    one or more names separated by commas or spaces; none at all means all four."""
    names: list[str] = []
    for value in values:
        pieces = value.replace(",", " ").split()
        if not pieces:
            raise OptionError(f"--configs: {value!r} names no configuration "
                              f"({EXPECTED_CONFIGS})")
        for piece in pieces:
            if piece not in CONFIG_NAMES:
                raise OptionError(f"--configs: {piece!r} is not a configuration "
                                  f"({EXPECTED_CONFIGS})")
            names.append(piece)
    return list(dict.fromkeys(names or CONFIG_NAMES))


def check_names(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    """--checks `a,b` -> ["a", "b"]; an unknown name is a bad parameter."""
    names = [c.strip() for c in value.split(",") if c.strip()]
    try:
        select_checks(names)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    return names


def report_result(result: CheckResult) -> None:
    """One progress line on stderr as each check finishes."""
    mark = "[green]PASS" if result.passed else "[red]FAIL"
    err.print(f"{result.config} {result.name}: {mark}[/] ({result.seconds:.0f}s) "
              f"{escape(result.message[:120])}", highlight=False, soft_wrap=True)


@click.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the results as JSON to this file.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write JUnit XML to this file.")
@click.option("--configs", "configs", multiple=True, callback=config_names,
              help=f"Configurations out of {', '.join(CONFIG_NAMES)}: separated by commas "
                   "or spaces, or --configs repeated; default all four.")
@click.option("--checks", "checks", default=",".join(DEFAULT_CHECK_NAMES), show_default=True,
              callback=check_names,
              help=f"Comma-separated checks out of: {', '.join(CHECK_NAMES)}.")
@click.option("--timeout-scale", default="1.0", show_default=True, metavar="FACTOR",
              callback=scale_value,
              envvar="NEXOS_TIMEOUT_SCALE", show_envvar=True,
              help="Multiply every check's time limit (and each boot's); the option "
                   "overrides NEXOS_TIMEOUT_SCALE.")
@click.option("--transcripts", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the console transcripts.")
@click.option("--hidden", "hidden", multiple=True, metavar="FILE.c[:POINTS]",
              help="A course's hidden test program: built onto the image (make EXTRA_UPROGS) "
                   "and run as a check that passes on ALL TESTS PASSED (default 10 points); "
                   "one named like a built-in test program (lazytests.c) replaces it. "
                   "Repeat for more.")
@click.option("--lab", "lab_name", type=click.Choice(list(LAB_CHOICES)), default=None,
              help="Grade a lab (docs/lab.md): in each configuration the checks that lab's "
                   "plan runs there (see 'nexos lab plan'); --configs narrows it.")
@click.option("--jobs", type=click.IntRange(1), default=host_cores(), show_default=True,
              help="Configurations graded at once, each in its own QEMU (default: the "
                   "host's cores).")
@mem_opt
@swap_opt
@nobuild_opt
@click.pass_context
def grade(ctx: click.Context, json_path: Path | None, junit_path: Path | None,
          configs: list[str], checks: list[str], timeout_scale: float,
          transcripts: Path | None, hidden: tuple[str, ...], lab_name: str | None,
          jobs: int, memsize: int, swapsize: int, no_build: bool) -> None:
    """Run every check on every configuration; points; non-zero exit on any failure."""
    for value in hidden:
        check_hidden_file(value)
    for path in (json_path, junit_path):
        check_output_file(path)
    check_output_dir(transcripts)
    try:
        sources, hidden_specs = hidden_checks(hidden, timeout_scale)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--hidden") from None
    cfgs = [BuildConfig.parse(name, memsize, swapsize=swapsize) for name in configs]
    if lab_name is None:
        plan: Plan = [(cfg, with_hidden(select_checks(checks, timeout_scale), hidden_specs))
                      for cfg in cfgs]
    elif ctx.get_parameter_source("checks") != click.core.ParameterSource.DEFAULT:
        raise OptionError("--checks and --lab do not go together: a lab's plan chooses "
                          "the checks (see 'nexos lab plan --lab LAB')")
    else:
        # the lab's plan knows nothing of swap, a boot-time choice: the boots get --swap
        plan = [(cfg, with_hidden(select_checks(names, timeout_scale), hidden_specs))
                for cfg, names in ((replace(c, swapsize=swapsize), n)
                                   for c, n in lab_plan(lab_name, memsize)) if cfg in cfgs]
    r = repo()
    find_toolchain(need_gcc=not no_build)  # both tools named at once when both are missing
    results = grade_all(r, plan, sources, build=not no_build,
                        transcript_dir=transcripts, console=err, on_result=report_result,
                        timeout_scale=timeout_scale, jobs=jobs)
    out.print(grade_table(results))
    if json_path:
        save_text(json_path, grade_json(results))
    if junit_path:
        save_text(junit_path, grade_junit(results))
    sys.exit(0 if all(x.passed for x in results) else 1)
