"""The `nexos` command line. It only wires the other modules together."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

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
from nexos.course.lab.cli import lab
from nexos.course.lab.plan import LAB_CHOICES, lab_plan
from nexos.course.report import grade_json, grade_junit, grade_table
from nexos.machine.build import BuildError, build_all, ensure_built
from nexos.machine.config import (
    ALL_CONFIGS,
    MAX_CPUS,
    MAX_SWAPSIZE,
    BuildConfig,
    ConfigError,
    find_repo,
    llm_cpus,
    matrix,
)
from nexos.machine.doctor import doctor
from nexos.machine.limits import (
    SMOLPROBE_MAX_SAMPLES,
    SMOLPROBE_SEQ_LEN,
    SMOLSERVE_MAX_PROMPT,
    SMOLSERVE_MAX_REQUESTS,
)
from nexos.machine.qemu import QemuError, QemuSession, kill_all
from nexos.machine.toolchain import ToolchainError, find_toolchain
from nexos.model.cli import model
from nexos.parse import ParseError, find_problems
from nexos.programs.compare import ProbeFailed, compare_probes, probe_record, run_probe, run_probes
from nexos.programs.serve import (
    DEFAULT_MAX_LEN,
    DEFAULT_REQUESTS,
    GUEST_WORKLOAD,
    PRESSURE_MEMSIZE,
    PRESSURE_WORKLOADS,
    ServeWorkload,
    pressure_workloads,
    read_workload,
    run_serves,
    run_swap_comparisons,
    serve_command,
    serve_workload,
    workload_commands,
)
from nexos.programs.tables import (
    compare_table,
    formulas_note,
    parallel_table,
    probe_table,
    record_json,
    records_json,
    serve_json,
    serve_table,
    swap_json,
    swap_table,
    write_text,
)
from nexos.records import TEXT_GEN, CheckResult, ProbeRequest

err = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 1) -> None:
    """Print one line on stderr and exit."""
    click.echo(f"nexos: error: {message}", err=True)
    sys.exit(code)


class NexosGroup(click.Group):
    """A group whose errors are one line each: no tracebacks, no usage dumps; Ctrl-C -> 130."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        try:
            rv = super().main(args, prog_name or "nexos", complete_var,
                              standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
            fail(e.format_message() + hint, 2)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except (click.Abort, KeyboardInterrupt):
            kill_all()
            click.echo("nexos: interrupted; QEMU stopped", err=True)
            sys.exit(130)
        except (ConfigError, ToolchainError) as e:
            fail(str(e))
        except BuildError as e:
            if e.excerpt:
                click.echo(e.excerpt, err=True)
            fail(str(e))
        except (QemuError, ProbeFailed) as e:
            if e.evidence and e.evidence.strip() not in str(e):
                click.echo(e.evidence.rstrip()[-1500:], err=True)
            fail(str(e))
        except ParseError as e:
            fail(str(e))
        sys.exit(rv if isinstance(rv, int) else 0)


def bit_option(name: str, default: int, what: str) -> Any:
    return click.option(name, type=click.IntRange(0, 1), default=default, show_default=True,
                        help=what)


lazy_opt = bit_option("--lazy", 1, "LAZY_ALLOC (lazy sbrk).")
cow_opt = bit_option("--cow", 1, "COW_ALLOC (copy-on-write fork).")
mem_opt = click.option("--mem", "memsize", type=int, default=512, show_default=True,
                       help="Guest RAM in MiB (MEMSIZE).")
cpus_opt = click.option("--cpus", type=click.IntRange(1, 8), default=1, show_default=True,
                        help="Harts (-smp).")
llm_cpus_opt = click.option("--cpus", type=click.IntRange(1, MAX_CPUS), default=llm_cpus(),
                            show_default=True,
                            help="Harts (-smp); smolprobe uses them all (docs/harts.md).")
swap_opt = click.option("--swap", "swapsize", type=click.IntRange(0, MAX_SWAPSIZE), default=0,
                        show_default=True, metavar="MiB",
                        help="Boot with a swap disk of this many MiB (a private sparse file "
                             "per boot, removed afterwards; 0: no swap). The build is the "
                             "same.")
nobuild_opt = click.option("--no-build", is_flag=True, help="Do not run make first.")


def tokens_type(text: str) -> tuple[int, ...]:
    """`1,2,3` -> (1, 2, 3)."""
    try:
        toks = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of token ids") from None
    if not toks or min(toks) < 0:
        raise click.BadParameter(f"{text!r}: need one or more non-negative token ids")
    return toks


def repo() -> Path:
    return find_repo()


def prepare(configs: list[BuildConfig], llm: bool, no_build: bool) -> Path:
    """The checkout, with `configs` built unless --no-build."""
    r = repo()
    find_toolchain(need_gcc=not no_build)  # both tools named at once when both are missing
    if not no_build:
        ensure_built(r, configs, llm=llm, console=err)
    return r


def check_output_file(path: Path | None) -> None:
    """ConfigError `<path>: cannot write (...)` unless `path` (an output file option; None:
    not given) can be created: its folder exists. Checked before the long work, so a typo
    does not cost a whole run."""
    if path is None:
        return
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{path}: cannot write (no folder {folder})")


def check_output_dir(path: Path | None) -> None:
    """ConfigError `<path>: cannot create (...)` unless folder `path` exists or can be made:
    the nearest part of it that exists is a folder."""
    if path is None:
        return
    there = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    if not there.is_dir():
        raise ConfigError(f"{path}: cannot create ({there} is not a folder)")


def save_text(path: Path, text: str) -> None:
    """report.write_text, with a failed write as ConfigError `<path>: cannot write (...)`."""
    try:
        write_text(path, text)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write ({e.strerror or e})") from None


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


@contextmanager
def session_after(session: QemuSession, setup: list[str], timeout: float
                  ) -> Iterator[QemuSession]:
    """`session`, booted, once every command of `setup` ran in its shell without printing
    anything (a command that prints is a QemuError: the shell refused it)."""
    with session as s:
        for cmd in setup:
            said = s.run(cmd, timeout).output.strip()
            if said:
                raise QemuError(f"`{cmd}` failed: {said.splitlines()[0]}", said)
        yield s


@click.group(cls=NexosGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nexos")
def cli() -> None:
    """Build, boot, probe, compare and grade the NexOS teaching kernel."""


@cli.command()
@lazy_opt
@cow_opt
@mem_opt
@click.option("--all", "all_", is_flag=True, help="Build all four LAZY/COW configurations.")
@click.option("--llm", is_flag=True, help="Also build the LLM image (fs-llm.img).")
def build(lazy: int, cow: int, memsize: int, all_: bool, llm: bool) -> None:
    """Build kernel and file-system image(s) into build/lazy<L>-cow<C>/."""
    configs = matrix(memsize) if all_ else [BuildConfig(lazy, cow, memsize)]
    results = build_all(repo(), configs, llm=llm, console=err)
    failed = [r for r in results if not r.ok]
    for r in failed:
        click.echo(f"--- {r.config.name}:\n{r.excerpt}", err=True)
    if failed:
        fail("build failed for " + ", ".join(r.config.name for r in failed))
    for r in results:
        click.echo(f"{r.config.name}: {r.build_dir} ({r.seconds:.1f}s)")


@cli.command(context_settings={"ignore_unknown_options": False})
@lazy_opt
@cow_opt
@mem_opt
@cpus_opt
@swap_opt
@click.option("--llm", is_flag=True, help="Boot the LLM image (with the model checkpoint).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds each command may take.")
@click.option("--transcript", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the whole console transcript to this file.")
@nobuild_opt
@click.argument("commands", nargs=-1, required=True)
def run(lazy: int, cow: int, memsize: int, cpus: int, swapsize: int, llm: bool,
        timeout: float, transcript: Path | None, no_build: bool,
        commands: tuple[str, ...]) -> None:
    """Boot, run each COMMAND in the NexOS shell, stream the output.

    Exit status 1 when a command shows SOME TESTS FAILED, usertrap:, panic:,
    [smolprobe] error: or times out. Example: nexos run -- "echo hi" usertests"""
    cfg = BuildConfig(lazy, cow, memsize, cpus, swapsize)
    check_output_file(transcript)
    r = prepare([cfg], llm, no_build)
    failed = False

    def stream(data: str) -> None:
        sys.stdout.write(data)
        sys.stdout.flush()
    with QemuSession.for_config(cfg, r, llm=llm, transcript=transcript,
                                lifetime=timeout * len(commands) + 300) as s:
        assert s.boot is not None
        click.echo(f"nexos: booted {cfg.name} in {s.boot_seconds:.1f}s: {s.boot.line}",
                   err=True)
        s.on_output = stream
        stream("$ ")
        for cmd in commands:
            try:
                res = s.run(cmd, timeout)
            except QemuError as e:
                click.echo(f"\nnexos: `{cmd}` failed: {e}", err=True)
                sys.exit(1)
            problems = find_problems(res.output)
            if problems:
                failed = True
                click.echo(f"\nnexos: `{cmd}` failed: {problems[0]}", err=True)
    sys.stdout.write("\n")
    sys.exit(1 if failed else 0)


@cli.command(context_settings={"ignore_unknown_options": True})
@bit_option("--lazy", 1, "LAZY_ALLOC.")
@bit_option("--cow", 0, "COW_ALLOC (smolprobe does not fork unless --samples).")
@mem_opt
@llm_cpus_opt
@click.option("--timeout", type=float, default=900.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the parsed record as JSON.")
@nobuild_opt
@click.argument("smolprobe_args", nargs=-1, type=click.UNPROCESSED)
def probe(lazy: int, cow: int, memsize: int, cpus: int, timeout: float, as_json: bool,
          no_build: bool, smolprobe_args: tuple[str, ...]) -> None:
    """Run smolprobe once and show its parsed result.

    Arguments after the options go to smolprobe (default: --prompt-tokens 1,2,3 --gen-len 10;
    or e.g. -- --chat "What is the capital of France?")."""
    cfg = BuildConfig(lazy, cow, memsize, cpus)
    try:
        req = ProbeRequest.from_args(smolprobe_args)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="SMOLPROBE_ARGS") from None
    r = prepare([cfg], True, no_build)
    run_ = run_probe(r, cfg, req, timeout)
    if run_.problem:
        if run_.evidence:
            click.echo(run_.evidence.rstrip()[-1500:], err=True)
        fail(run_.problem)
    assert run_.result is not None
    if as_json:
        click.echo(record_json(probe_record(run_, req)))
    else:
        out.print(probe_table(run_.result, f"smolprobe on {cfg.name} ({run_.seconds:.1f}s)"))
    if run_.result.error:
        sys.exit(1)


@cli.command()
@mem_opt
@llm_cpus_opt
@click.option("--gen-len", type=click.IntRange(1), default=TEXT_GEN, show_default=True,
              help="The longest answer, in tokens (it ends earlier at <|im_end|>).")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
@click.argument("question")
def chat(memsize: int, cpus: int, gen_len: int, timeout: float, no_build: bool,
         question: str) -> None:
    """Ask the model on the LLM image one QUESTION (smolprobe --chat) in a lazy kernel
    (lazy1-cow0): its answer, then the KV pages the answer really mapped."""
    cfg = BuildConfig(1, 0, memsize, cpus)
    req = ProbeRequest(gen_len=gen_len, text=("--chat", question))
    run_ = run_probe(prepare([cfg], True, no_build), cfg, req, timeout)
    if run_.problem:
        if run_.evidence:
            click.echo(run_.evidence.rstrip()[-1500:], err=True)
        fail(run_.problem)
    res = run_.result
    assert res is not None
    if res.error or res.summary is None or res.text is None:
        fail(f"smolprobe: {res.error or 'no answer'}")
    assert res.summary is not None and res.generated is not None and res.prompt is not None
    out.print(escape(res.text or ""), highlight=False)
    s = res.summary
    out.print(f"[dim]{len(res.prompt)} prompt + {res.generated.tokens} answer tokens "
              f"in {run_.seconds:.1f}s on {cfg.name}: {s.actual_mapped_pages} of "
              f"{s.max_kv_pages} reserved KV pages mapped, {s.saved_pages} "
              f"({s.saved_percent}%) never touched[/]", highlight=False)


def request_options(f: Any) -> Any:
    for opt in reversed([
        click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3",
                     show_default=True, help="Prompt token ids."),
        click.option("--prompt", "prompt_text", default=None, metavar="TEXT",
                     help="A text prompt instead of --prompt-tokens, encoded by the "
                          "model's tokenizer in the guest (smolprobe --prompt)."),
        click.option("--gen-len", type=click.IntRange(0), default=10, show_default=True),
        click.option("--seq-len", type=click.IntRange(1), default=None,
                     help=f"smolprobe --seq-len (default {SMOLPROBE_SEQ_LEN}, at most the "
                          "model's max_seq_len)."),
        click.option("--samples", type=click.IntRange(1, SMOLPROBE_MAX_SAMPLES), default=None,
                     help=f"Parallel sampling branches, 1..{SMOLPROBE_MAX_SAMPLES} "
                          "(smolprobe --samples)."),
        click.option("--timeout", type=float, default=900.0, show_default=True),
    ]):
        f = opt(f)
    return f


@cli.command()
@request_options
@click.option("--matrix", "all_", is_flag=True, help="All four LAZY/COW configurations.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@mem_opt
@nobuild_opt
def compare(prompt: tuple[int, ...], prompt_text: str | None, gen_len: int,
            seq_len: int | None, samples: int | None, timeout: float, all_: bool,
            as_json: bool, memsize: int, no_build: bool) -> None:
    """smolprobe on eager (LAZY_ALLOC=0) vs lazy (LAZY_ALLOC=1), side by side.

    With --samples N the same request with --samples N also runs on the lazy kernel with
    COW_ALLOC=0 and =1 (smolprobe forks N branches after the prompt), for a second table:
    parallel sampling with COW off and on."""
    if prompt_text is not None and samples is not None:
        raise OptionError("--samples takes --prompt-tokens, not a text --prompt "
                          "(smolprobe's branches start from token ids)")
    text = None if prompt_text is None else ("--prompt", prompt_text)
    req = ProbeRequest(prompt, gen_len, seq_len, text=text)
    probes = compare_probes(req, samples, all_, memsize)
    r = prepare(list(dict.fromkeys(c for c, _ in probes)), True, no_build)
    records = [probe_record(run_, asked)
               for run_, (_, asked) in zip(run_probes(r, probes, timeout), probes)]
    if as_json:
        click.echo(records_json(records))
    else:
        out.print(compare_table(records, req.command()))
        out.print(formulas_note(records), highlight=False)
        par = parallel_table(records)
        if par is not None:
            out.print(par)
    sys.exit(1 if any(x.failed for x in records) else 0)


CONFIG_NAMES = tuple(BuildConfig(lazy, cow).name for lazy, cow in ALL_CONFIGS)
EXPECTED_CONFIGS = f"expected {', '.join(CONFIG_NAMES[:-1])} or {CONFIG_NAMES[-1]}"


class OptionError(click.ClickException):
    """A bad option value, reported as `nexos: error: <message>` with exit status 2."""

    exit_code = 2


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


@cli.command()
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
@mem_opt
@swap_opt
@nobuild_opt
@click.pass_context
def grade(ctx: click.Context, json_path: Path | None, junit_path: Path | None,
          configs: list[str], checks: list[str], timeout_scale: float,
          transcripts: Path | None, hidden: tuple[str, ...], lab_name: str | None,
          memsize: int, swapsize: int, no_build: bool) -> None:
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
                        timeout_scale=timeout_scale)
    out.print(grade_table(results))
    if json_path:
        save_text(json_path, grade_json(results))
    if junit_path:
        save_text(junit_path, grade_junit(results))
    sys.exit(0 if all(x.passed for x in results) else 1)


def int_list(text: str, what: str, most: int | None = None) -> tuple[int, ...]:
    """`64,128,256` -> (64, 128, 256); the empty string -> (). Values 1..most."""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of integers", param_hint=what) from None
    if any(v < 1 for v in vals):
        raise click.BadParameter(f"{text!r}: values must be >= 1", param_hint=what)
    if most is not None and any(v > most for v in vals):
        raise click.BadParameter(f"{text!r}: values must be <= {most}", param_hint=what)
    return vals


@cli.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("build/plots"), show_default=True, help="Where the PNGs go.")
@click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3", show_default=True)
@click.option("--gen-len", type=click.IntRange(1), default=40, show_default=True,
              help="Tokens to generate for the trace figure.")
@click.option("--seq-lens", default="64,128,256", show_default=True,
              help="seq_len values for the saved-fraction figure ('' skips it).")
@click.option("--branches", default="1,2,4", show_default=True,
              help=f"--samples values (1..{SMOLPROBE_MAX_SAMPLES}) for the branches figure "
                   "('' skips it).")
@click.option("--branch-gen-len", type=click.IntRange(1), default=8, show_default=True,
              help="Tokens each branch generates for the branches figure (a branch makes "
                   "all its copies at its first writes).")
@click.option("--serve", "serve_flags", default="--requests 8 --max-len 256 --long-len 4",
              show_default=True,
              help="smolserve flags for the serving figure, all four kernels ('' skips it).")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
def plot(out_dir: Path, prompt: tuple[int, ...], gen_len: int, seq_lens: str, branches: str,
         branch_gen_len: int, serve_flags: str, timeout: float, no_build: bool) -> None:
    """PNG figures: mapped KV pages vs tokens (eager vs lazy, from --trace); saved fraction vs
    seq_len (lazy); pages the branches of --samples N cost vs N (COW on vs off); smolserve's
    concurrent requests and memory over time (all four kernels)."""
    from nexos.programs.plot import (  # matplotlib loads slowly
        PlotPlan,
        write_plots,
        write_serve_plot,
    )

    check_output_dir(out_dir)
    plan = PlotPlan(prompt, gen_len, int_list(seq_lens, "--seq-lens"),
                    int_list(branches, "--branches", SMOLPROBE_MAX_SAMPLES),
                    tuple(serve_flags.split()), branch_gen_len)
    serve_cfgs = [BuildConfig(lz, cw, cpus=2) for lz, cw in plan.serve_configs()]
    r = prepare(list(dict.fromkeys(plan.configs() + serve_cfgs)), True, no_build)
    for png in write_plots(plan, run_probes(r, plan.probes(), timeout), out_dir):
        click.echo(f"wrote {png}")
    if serve_cfgs:
        def open_shell(lazy: int, cow: int, n: int) -> QemuSession:
            return QemuSession.for_config(BuildConfig(lazy, cow, cpus=n), r, llm=True)

        records = run_serves(open_shell, plan.serve_configs(), 2, plan.serve_args, timeout,
                             (QemuError,))
        try:
            click.echo(f"wrote {write_serve_plot(records, out_dir)}")
        except ValueError as e:
            fail(str(e))


@cli.command()
@click.option("--matrix", "all_", is_flag=True,
              help="All four LAZY/COW configurations (default: lazy0-cow0 and lazy1-cow1).")
@click.option("--workload", default=None, metavar="seed32|FILE",
              help="The built-in seed32, or a workload file on this machine (lines `id "
                   "max_len prompt gen=N|eos`, docs/smolserve.md): checked first, then "
                   f"written into each guest as {GUEST_WORKLOAD}.")
@click.option("--requests", type=click.IntRange(1, SMOLSERVE_MAX_REQUESTS), default=None,
              show_default=f"{DEFAULT_REQUESTS} when no workload is given",
              help="A generated workload of N requests (with --max-len).")
@click.option("--max-len", type=click.IntRange(2), default=None,
              show_default=f"{DEFAULT_MAX_LEN} when no workload is given",
              help="Slots each generated request reserves (with --requests).")
@click.option("--seed", type=click.IntRange(0), default=None,
              help="The generated workload's seed (smolserve's default 0).")
@click.option("--long-len", type=click.IntRange(1), default=None,
              help="Longest generated answer (smolserve's default 16).")
@click.option("--prefix-len", type=click.IntRange(1, SMOLSERVE_MAX_PROMPT - 4), default=None,
              help="Every generated prompt begins with the same K tokens, a prefix the "
                   "server prefills once and its workers share (docs/smolserve.md).")
@click.option("--share-prefix/--no-share-prefix", default=True, show_default=True,
              help="Whether requests that begin with the same prefix share it; without, "
                   "each request prefills its whole prompt alone.")
@click.option("--cpus", type=click.IntRange(1, 8), default=2, show_default=True, help="Harts.")
@click.option("--swap", "swap_mib", type=click.IntRange(1, MAX_SWAPSIZE), default=None,
              metavar="MiB",
              help="Recompute against swap: run each workload under overcommit (smolserve "
                   "--overcommit 1 --test-fill 1) on a boot without swap and on one with a "
                   "swap disk of MiB, and print them side by side. With no workload options: "
                   "a short, a medium and a long workload "
                   f"({', '.join(f'{n}x{m}' for _, n, m in PRESSURE_WORKLOADS)}), "
                   f"--mem {PRESSURE_MEMSIZE} unless given, lazy1-cow1 unless --matrix.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.option("--timeout", type=float, default=1800.0, show_default=True)
@mem_opt
@nobuild_opt
def serve(all_: bool, workload: str | None, requests: int | None, max_len: int | None,
          seed: int | None, long_len: int | None, prefix_len: int | None, share_prefix: bool,
          cpus: int, swap_mib: int | None, as_json: bool, timeout: float, memsize: int,
          no_build: bool) -> None:
    """smolserve (docs/smolserve.md): how many requests run at once, per configuration.

    With no workload options it runs the README's: --requests 32 --max-len 2048. With
    --swap MiB: what memory pressure costs without swap (recompute) and with it."""
    if swap_mib is not None:
        serve_swap(all_, (workload, requests, max_len, seed, long_len, prefix_len),
                   share_prefix, cpus, swap_mib, as_json, timeout, memsize, no_build)
        return
    load, setup = serve_plan(workload, requests, max_len, seed, long_len, prefix_len,
                             share_prefix)
    configs = matrix(memsize, cpus) if all_ else [BuildConfig(0, 0, memsize, cpus),
                                                  BuildConfig(1, 1, memsize, cpus)]
    r = prepare(configs, True, no_build)
    if load.note and not as_json:
        out.print(load.note, highlight=False)

    def open_shell(lazy: int, cow: int, n: int) -> AbstractContextManager[QemuSession]:
        session = QemuSession.for_config(BuildConfig(lazy, cow, memsize, n), r, llm=True,
                                         lifetime=timeout + 300)
        return session_after(session, setup, 60.0)

    records = run_serves(open_shell, [(c.lazy, c.cow) for c in configs], cpus, load.args,
                         timeout, (QemuError,))
    if as_json:
        click.echo(serve_json(records))
    else:
        out.print(serve_table(records, serve_command(load.args)))
    sys.exit(1 if any(x.failed for x in records) else 0)


def serve_swap(all_: bool, options: tuple, share_prefix: bool, cpus: int, swap_mib: int,
               as_json: bool, timeout: float, memsize: int, no_build: bool) -> None:
    """`nexos serve --swap MiB`: each workload on each configuration without swap and with
    (docs/smolserve.md, "Overcommit: recompute against swap"); exit 1 unless every pair
    completed every request with the same answers."""
    workload, requests, max_len, seed, long_len, prefix_len = options
    setup: list[str] = []
    if workload is None and requests is None and max_len is None:
        tuning = [f for f, v in (("--seed", seed), ("--long-len", long_len),
                                 ("--prefix-len", prefix_len)) if v is not None]
        if tuning or not share_prefix:
            given = tuning or ["--no-share-prefix"]
            raise OptionError(f"{' and '.join(given)} goes with a given workload (--workload, "
                              "or --requests/--max-len): --swap alone runs its own three")
        workloads = pressure_workloads(None)
        if click.get_current_context().get_parameter_source("memsize") == \
                click.core.ParameterSource.DEFAULT:
            memsize = PRESSURE_MEMSIZE
    else:
        load, setup = serve_plan(workload, requests, max_len, seed, long_len, prefix_len,
                                 share_prefix)
        workloads = pressure_workloads(load)
    configs = matrix(memsize, cpus) if all_ else [BuildConfig(1, 1, memsize, cpus)]
    r = prepare(configs, True, no_build)

    def open_shell(lazy: int, cow: int, n: int, swap: int
                   ) -> AbstractContextManager[QemuSession]:
        cfg = BuildConfig(lazy, cow, memsize, n, swapsize=swap)
        session = QemuSession.for_config(cfg, r, llm=True, lifetime=timeout + 300)
        return session_after(session, setup, 60.0)

    pairs = run_swap_comparisons(open_shell, [(c.lazy, c.cow) for c in configs], cpus,
                                 workloads, swap_mib, timeout, (QemuError,))
    if as_json:
        click.echo(swap_json(pairs))
    else:
        out.print(swap_table(pairs))
        for c in pairs:
            if c.problem is None:
                continue
            for rec in (c.without, c.with_swap):
                if rec.evidence:
                    out.print(f"[bold]{c.workload}, {rec.config}:[/bold] {rec.command}",
                              highlight=False)
                    out.print(rec.evidence[-1500:], markup=False, highlight=False)
    sys.exit(1 if any(c.problem is not None for c in pairs) else 0)


def serve_plan(workload: str | None, requests: int | None, max_len: int | None,
               seed: int | None, long_len: int | None, prefix_len: int | None = None,
               share_prefix: bool = True) -> tuple[ServeWorkload, list[str]]:
    """`nexos serve`'s workload options -> (serve.serve_workload's answer, the shell
    commands that write its workload file into the guest). A mix or a half of the options
    is an OptionError (exit 2); a bad workload file a ConfigError `<file>[:<line>]: <why>`
    (exit 1), both before anything is built."""
    try:
        load = serve_workload(workload, requests, max_len, seed, long_len, prefix_len,
                              share_prefix)
    except ValueError as e:
        raise OptionError(str(e)) from None
    if load.file is None:
        return load, []
    try:
        return load, workload_commands(read_workload(load.file))
    except ValueError as e:
        raise ConfigError(str(e)) from None


cli.add_command(model)
cli.add_command(lab)
cli.add_command(doctor)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")

