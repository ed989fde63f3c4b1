"""`nexos build` and `nexos run`: the kernel built and booted, commands run in its shell."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nexos.clikit import (
    check_output_file,
    cow_opt,
    cpus_opt,
    err,
    fail,
    lazy_opt,
    mem_opt,
    nobuild_opt,
    prepare,
    repo,
    swap_opt,
)
from nexos.machine.build import build_all
from nexos.machine.config import BuildConfig, matrix
from nexos.machine.qemu import QemuError, QemuSession
from nexos.parse import find_problems


@click.command()
@lazy_opt
@cow_opt
@click.option("--all", "all_", is_flag=True, help="Build all four LAZY/COW configurations.")
@click.option("--llm", is_flag=True, help="Also build the LLM image (fs-llm.img).")
def build(lazy: int, cow: int, all_: bool, llm: bool) -> None:
    """Build kernel and file-system image(s) into build/lazy<L>-cow<C>/ (one build boots with
    any RAM, harts and swap: nexos run --mem/--cpus/--swap)."""
    configs = matrix() if all_ else [BuildConfig(lazy, cow)]
    results = build_all(repo(), configs, llm=llm, console=err)
    failed = [r for r in results if not r.ok]
    for r in failed:
        click.echo(f"--- {r.config.folder}:\n{r.excerpt}", err=True)
    if failed:
        fail("build failed for " + ", ".join(r.config.folder for r in failed))
    for r in results:
        click.echo(f"{r.config.folder}: {r.build_dir} ({r.seconds:.1f}s)")


@click.command(context_settings={"ignore_unknown_options": False})
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
