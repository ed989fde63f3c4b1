"""The `nexos` command line. It only wires the other modules together."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from nexos.build import BuildError, build_all, ensure_built
from nexos.compare import (
    ProbeRequest,
    ProbeRun,
    compare_configs,
    probe_record,
    run_many,
    run_probe,
)
from nexos.config import BuildConfig, ConfigError, find_repo, matrix
from nexos.grade import (
    CHECK_NAMES,
    DEFAULT_CHECK_NAMES,
    CheckResult,
    CheckSpec,
    default_checks,
    grade_config,
    judge_test_program,
)
from nexos.model.cli import model
from nexos.parse import ParseError, SmolprobeResult, find_problems, parse_smolprobe
from nexos.qemu import QemuError, QemuSession, kill_all
from nexos.report import (
    compare_table,
    grade_json,
    grade_junit,
    grade_table,
    parallel_table,
    probe_table,
    write_text,
)
from nexos.toolchain import ToolchainError, find_toolchain

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
        except QemuError as e:
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
@click.option("--llm", is_flag=True, help="Boot the LLM image (with the model checkpoint).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds each command may take.")
@click.option("--transcript", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the whole console transcript to this file.")
@nobuild_opt
@click.argument("commands", nargs=-1, required=True)
def run(lazy: int, cow: int, memsize: int, cpus: int, llm: bool, timeout: float,
        transcript: Path | None, no_build: bool, commands: tuple[str, ...]) -> None:
    """Boot, run each COMMAND in the NexOS shell, stream the output.

    Exit status 1 when a command shows SOME TESTS FAILED, usertrap:, panic:,
    [smolprobe] error: or times out. Example: nexos run -- "echo hi" usertests"""
    cfg = BuildConfig(lazy, cow, memsize, cpus)
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
@click.option("--timeout", type=float, default=900.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the parsed record as JSON.")
@nobuild_opt
@click.argument("smolprobe_args", nargs=-1, type=click.UNPROCESSED)
def probe(lazy: int, cow: int, memsize: int, timeout: float, as_json: bool, no_build: bool,
          smolprobe_args: tuple[str, ...]) -> None:
    """Run smolprobe once and show its parsed result.

    Arguments after the options go to smolprobe (default: --prompt-tokens 1,2,3 --gen-len 10)."""
    cfg = BuildConfig(lazy, cow, memsize)
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
        click.echo(json.dumps(probe_record(run_, req), indent=2))
    else:
        out.print(probe_table(run_.result, f"smolprobe on {cfg.name} ({run_.seconds:.1f}s)"))
    if run_.result.error:
        sys.exit(1)


def request_options(f: Any) -> Any:
    for opt in reversed([
        click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3",
                     show_default=True, help="Prompt token ids."),
        click.option("--gen-len", type=click.IntRange(0), default=10, show_default=True),
        click.option("--seq-len", type=click.IntRange(1), default=None,
                     help="smolprobe --seq-len (runtime_seq_len, default 256)."),
        click.option("--samples", type=click.IntRange(1, 6), default=None,
                     help="Parallel sampling branches, 1..6 (smolprobe --samples)."),
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
def compare(prompt: tuple[int, ...], gen_len: int, seq_len: int | None, samples: int | None,
            timeout: float, all_: bool, as_json: bool, memsize: int, no_build: bool) -> None:
    """smolprobe on eager (LAZY_ALLOC=0) vs lazy (LAZY_ALLOC=1), side by side.

    With --samples N smolprobe forks N branches after the prompt, and the lazy kernel with
    COW_ALLOC=1 joins, for a second table: parallel sampling with COW off and on."""
    configs = compare_configs(all_, samples, memsize)
    req = ProbeRequest(prompt, gen_len, seq_len, samples)
    r = prepare(configs, True, no_build)
    runs = run_many(r, configs, req, timeout, jobs=2)
    records = [probe_record(x, req) for x in runs]
    if as_json:
        click.echo(json.dumps(records, indent=2))
    else:
        out.print(compare_table(records, req.command()))
        exp_max, exp_active = req.expected()
        out.print(f"DESIGN.md §5 formulas: max_kv_pages={exp_max} "
                  f"active_pages_est={exp_active}", highlight=False)
        par = parallel_table(records)
        if par is not None:
            out.print(par)
    if any(x.problem or (x.result and x.result.error) for x in runs):
        sys.exit(1)


def hidden_checks(values: tuple[str, ...], scale: float) -> tuple[list[Path], list[CheckSpec]]:
    """`tests/hidden/foo.c:25` -> the source (absolute) and a check `foo` worth 25 points."""
    sources, specs = [], []
    for v in values:
        path, _, pts = v.rpartition(":") if v.rpartition(":")[2].isdigit() else (v, "", "")
        src = Path(path).resolve()
        if src.suffix != ".c" or not src.is_file():
            raise click.BadParameter(f"{v!r}: need an existing .c file", param_hint="--hidden")
        if src.stem in CHECK_NAMES or any(s.name == src.stem for s in specs):
            raise click.BadParameter(f"{v!r}: the name {src.stem} is taken",
                                     param_hint="--hidden")
        sources.append(src)
        specs.append(CheckSpec(src.stem, int(pts or 10), False, src.stem, 600 * scale,
                               judge_test_program))
    return sources, specs


def parse_configs(values: tuple[str, ...], memsize: int) -> list[BuildConfig]:
    names = [v for value in values for v in value.replace(" ", ",").split(";") if v]
    if not names:
        return matrix(memsize)
    out_: list[BuildConfig] = []
    for n in names:
        for part in n.split("+"):
            out_.append(BuildConfig.parse(part, memsize))
    return out_


@cli.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the results as JSON to this file.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write JUnit XML to this file.")
@click.option("--configs", "configs", multiple=True,
              help="Configurations, e.g. lazy1-cow1 (repeat, or join with '+'); default all 4.")
@click.option("--checks", "checks", default=",".join(DEFAULT_CHECK_NAMES), show_default=True,
              help=f"Comma-separated checks out of: {', '.join(CHECK_NAMES)}.")
@click.option("--timeout-scale", type=click.FloatRange(0.01), default=1.0, show_default=True,
              help="Multiply every check's time limit.")
@click.option("--transcripts", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the console transcripts.")
@click.option("--hidden", "hidden", multiple=True, metavar="FILE.c[:POINTS]",
              help="A course's hidden test program: built onto the image (make EXTRA_UPROGS) "
                   "and run as a check that passes on ALL TESTS PASSED (default 10 points). "
                   "Repeat for more.")
@mem_opt
@nobuild_opt
def grade(json_path: Path | None, junit_path: Path | None, configs: tuple[str, ...],
          checks: str, timeout_scale: float, transcripts: Path | None, hidden: tuple[str, ...],
          memsize: int, no_build: bool) -> None:
    """Run every check on every configuration; points; non-zero exit on any failure."""
    cfgs = parse_configs(configs, memsize)
    wanted = [c.strip() for c in checks.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CHECK_NAMES]
    if unknown:
        raise click.BadParameter(f"unknown check(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(CHECK_NAMES)}", param_hint="--checks")
    specs = [c for c in default_checks(scale=timeout_scale) if c.name in wanted]
    sources, extra_specs = hidden_checks(hidden, timeout_scale)
    specs += extra_specs
    needs_llm = any(c.llm for c in specs)
    r = repo()
    results: list[CheckResult] = []
    find_toolchain(need_gcc=not no_build)
    if not no_build:  # a configuration that does not build fails its `build` check
        extra = (f"EXTRA_UPROGS={' '.join(str(x) for x in sources)}",) if sources else ()
        for b in build_all(r, cfgs, llm=needs_llm, console=err, extra=extra):
            if not b.ok:
                results.append(CheckResult(b.config.name, "build", False, 0, 0, b.seconds,
                                           "make failed", b.excerpt))
    broken = {x.config for x in results}
    if transcripts:
        transcripts.mkdir(parents=True, exist_ok=True)
    for cfg in cfgs:
        if cfg.name in broken:
            continue
        results += grade_config(r, cfg, specs, transcripts, on_result=lambda x: err.print(
            f"{x.config} {x.name}: {'[green]PASS' if x.passed else '[red]FAIL'}[/] "
            f"({x.seconds:.0f}s) {escape(x.message[:120])}", highlight=False, soft_wrap=True))
    out.print(grade_table(results))
    if json_path:
        write_text(json_path, grade_json(results))
    if junit_path:
        write_text(junit_path, grade_junit(results))
    sys.exit(0 if all(x.passed for x in results) else 1)


def int_list(text: str, what: str) -> list[int]:
    """`64,128,256` -> [64, 128, 256]; the empty string -> []."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of integers", param_hint=what) from None
    if any(v < 1 for v in vals):
        raise click.BadParameter(f"{text!r}: values must be >= 1", param_hint=what)
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
              help="--samples values for the branches figure ('' skips it).")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
def plot(out_dir: Path, prompt: tuple[int, ...], gen_len: int, seq_lens: str, branches: str,
         timeout: float, no_build: bool) -> None:
    """PNG figures: mapped KV pages vs tokens (eager vs lazy, from --trace); saved fraction vs
    seq_len (lazy); pages the branches of --samples N cost vs N (COW on vs off)."""
    from nexos.plot import plot_branches, plot_saved, plot_trace  # matplotlib loads slowly

    lens, ns = int_list(seq_lens, "--seq-lens"), int_list(branches, "--branches")
    eager, lazy, cow = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(1, 1)
    configs = [eager, lazy] + ([cow] if ns else [])
    r = prepare(configs, True, no_build)
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = ProbeRequest(prompt, gen_len, trace=True)
    jobs: list[tuple[BuildConfig, ProbeRequest]] = [(eager, trace), (lazy, trace)]
    for n in lens:
        jobs.append((lazy, ProbeRequest(prompt, min(gen_len, max(n - len(prompt), 0)),
                                        seq_len=n)))
    for n in ns:
        jobs += [(cow, ProbeRequest(prompt, gen_len, samples=n)),
                 (lazy, ProbeRequest(prompt, gen_len, samples=n))]
    runs = run_jobs(r, jobs, timeout)
    written = [plot_trace({f"{x.config.label} ({x.config.name})": need(x, "trace").trace
                           for x in runs[:2]}, out_dir / "kv_pages_vs_tokens.png",
                          trace.expected()[0])]
    if lens:
        points = []
        for (_, req), x in zip(jobs[2:2 + len(lens)], runs[2:2 + len(lens)]):
            summary = need(x, "SUMMARY").summary
            assert summary is not None and req.seq_len is not None
            mx, active = req.expected()
            points.append((req.seq_len, float(summary.saved_percent), 100.0 * (mx - active) / mx))
        written.append(plot_saved(points, out_dir / "saved_vs_seq_len.png"))
    if ns:
        series: dict[str, list[tuple[int, int]]] = {}
        for (cfg, req), x in zip(jobs[2 + len(lens):], runs[2 + len(lens):]):
            p = need(x, "PARALLEL_SUMMARY").parallel
            assert p is not None and req.samples is not None
            label = f"{'COW' if cfg.cow else 'copying'} fork ({cfg.name}): pages copied"
            series.setdefault(label, []).append((req.samples, p.actual_copied_pages))
            if cfg.cow:
                series.setdefault("an eager fork would copy", []).append(
                    (req.samples, p.eager_copy_pages))
        written.append(plot_branches(series, out_dir / "pages_vs_branches.png"))
    for w in written:
        click.echo(f"wrote {w}")


def run_jobs(r: Path, jobs: list[tuple[BuildConfig, ProbeRequest]], timeout: float
             ) -> list[ProbeRun]:
    """run_probe for every (configuration, request), two QEMUs at a time, in order."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda j: run_probe(r, j[0], j[1], timeout), jobs))


def need(x: ProbeRun, what: str) -> SmolprobeResult:
    """The parsed result of a run that printed `what`; otherwise a one-line error."""
    res = x.result
    ok = res is not None and not res.error and {
        "trace": bool(res.trace), "SUMMARY": res.summary is not None,
        "PARALLEL_SUMMARY": res.parallel is not None}[what]
    if not ok:
        why = x.problem or (res.error if res and res.error else f"no {what} line")
        fail(f"{x.config.name} `{x.command}`: {why}")
    assert res is not None
    return res


cli.add_command(model)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")


# Re-exported for tests that parse captured output without booting.
__all__ = ["cli", "main", "parse_smolprobe"]
