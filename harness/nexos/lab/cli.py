"""``nexos lab``: make | regions | plan. Wiring only; the work is in the modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nexos.config import ConfigError, find_repo
from nexos.lab.markers import MarkerError
from nexos.lab.plan import LAB_CHOICES, lab_checks, lab_plan
from nexos.lab.starter import StarterError, collect_regions, make_starter, source_files

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
        except (MarkerError, StarterError, ConfigError) as e:
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
