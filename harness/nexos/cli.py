"""The `nexos` command line. It only wires the other modules together."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nexos.build import BuildError, build_all, ensure_built
from nexos.compare import ProbeRequest, probe_record, run_many, run_probe
from nexos.config import BuildConfig, ConfigError, find_repo, matrix
from nexos.grade import (
    CHECK_NAMES,
    DEFAULT_CHECK_NAMES,
    CheckResult,
    default_checks,
    grade_config,
)
from nexos.kvcache import KvShape, active_pages_est, max_kv_pages
from nexos.model.cli import model
from nexos.parse import ParseError, find_problems, parse_smolprobe
from nexos.qemu import QemuError, QemuSession, kill_all
from nexos.report import (
    compare_table,
    grade_json,
    grade_junit,
    grade_table,
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
            if e.evidence:
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
    if no_build:
        find_toolchain(need_gcc=False)
    else:
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
        click.option("--samples", type=click.IntRange(1), default=None,
                     help="Parallel sampling branches (smolprobe --samples)."),
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
    """smolprobe on eager (LAZY_ALLOC=0) vs lazy (LAZY_ALLOC=1), side by side."""
    configs = matrix(memsize) if all_ else [BuildConfig(0, 0, memsize), BuildConfig(1, 0, memsize)]
    req = ProbeRequest(prompt, gen_len, seq_len, samples)
    r = prepare(configs, True, no_build)
    runs = run_many(r, configs, req, timeout, jobs=2)
    records = [probe_record(x, req) for x in runs]
    if as_json:
        click.echo(json.dumps(records, indent=2))
    else:
        out.print(compare_table(records))
        exp_max, exp_active = req.expected()
        out.print(f"formulas: max_kv_pages={exp_max} active_pages_est={exp_active}")
    if any(x.problem or (x.result and x.result.error) for x in runs):
        sys.exit(1)


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
@mem_opt
@nobuild_opt
def grade(json_path: Path | None, junit_path: Path | None, configs: tuple[str, ...],
          checks: str, timeout_scale: float, transcripts: Path | None, memsize: int,
          no_build: bool) -> None:
    """Run every check on every configuration; points; non-zero exit on any failure."""
    cfgs = parse_configs(configs, memsize)
    wanted = [c.strip() for c in checks.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CHECK_NAMES]
    if unknown:
        raise click.BadParameter(f"unknown check(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(CHECK_NAMES)}", param_hint="--checks")
    specs = [c for c in default_checks(scale=timeout_scale) if c.name in wanted]
    needs_llm = any(c.llm for c in specs)
    r = repo()
    results: list[CheckResult] = []
    if no_build:
        find_toolchain(need_gcc=False)
    else:  # a configuration that does not build fails its `build` check; the others go on
        for b in build_all(r, cfgs, llm=needs_llm, console=err):
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
            f"({x.seconds:.0f}s) {x.message[:120]}", markup=True, highlight=False))
    out.print(grade_table(results))
    if json_path:
        write_text(json_path, grade_json(results))
    if junit_path:
        write_text(junit_path, grade_junit(results))
    sys.exit(0 if all(x.passed for x in results) else 1)


@cli.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("build/plots"), show_default=True, help="Where the PNGs go.")
@click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3", show_default=True)
@click.option("--gen-len", type=click.IntRange(1), default=10, show_default=True)
@click.option("--seq-lens", default="64,128,256", show_default=True,
              help="seq_len values for the saved-fraction figure.")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
def plot(out_dir: Path, prompt: tuple[int, ...], gen_len: int, seq_lens: str, timeout: float,
         no_build: bool) -> None:
    """PNG figures: mapped KV pages vs generated tokens (eager vs lazy, from --trace) and
    saved fraction vs seq_len (lazy)."""
    from nexos.plot import plot_saved, plot_trace  # matplotlib is slow to import

    try:
        lens = [int(x) for x in seq_lens.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{seq_lens!r} is not a list of integers",
                                 param_hint="--seq-lens") from None
    eager, lazy = BuildConfig(0, 0), BuildConfig(1, 0)
    r = prepare([eager, lazy], True, no_build)
    out_dir.mkdir(parents=True, exist_ok=True)
    req = ProbeRequest(prompt, gen_len, trace=True)
    runs = run_many(r, [eager, lazy], req, timeout)
    for x in runs:
        if x.problem or x.result is None or not x.result.trace:
            fail(f"{x.config.name}: no trace ({x.problem or 'smolprobe printed no trace lines'})")
    series = {f"{x.config.label} ({x.config.name})": x.result.trace for x in runs if x.result}
    p1 = plot_trace(series, out_dir / "kv_pages_vs_tokens.png", req.expected()[0])
    points = []
    for n in lens:
        req_n = ProbeRequest(prompt, min(gen_len, max(n - len(prompt), 0)), seq_len=n)
        x = run_probe(r, lazy, req_n, timeout)
        if x.problem or x.result is None or x.result.summary is None:
            fail(f"seq_len={n}: {x.problem or (x.result and x.result.error)}")
        assert x.result is not None and x.result.summary is not None
        shape = KvShape().with_seq_len(n)
        rows = len(prompt) + req_n.gen_len
        mx = max_kv_pages(shape)
        formula = 100.0 * (mx - active_pages_est(shape, rows)) / mx
        points.append((n, float(x.result.summary.saved_percent), formula))
    p2 = plot_saved(points, out_dir / "saved_vs_seq_len.png")
    click.echo(f"wrote {p1}\nwrote {p2}")


cli.add_command(model)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")


# Re-exported for tests that parse captured output without booting.
__all__ = ["cli", "main", "parse_smolprobe"]
