"""The `nexos` command line: one group over each product's commands (machine/cli.py,
programs/cli.py, course/cli.py, model/cli.py, course/lab/cli.py, `doctor`, `fuzz`), every
error one line (clikit.NexosGroup). It only wires the other modules together."""

from __future__ import annotations

import click

from nexos.clikit import NexosGroup
from nexos.course.cli import grade
from nexos.course.lab.cli import lab
from nexos.machine.cli import build, run
from nexos.machine.doctor import doctor
from nexos.machine.fuzz import fuzz
from nexos.model.cli import model
from nexos.programs.cli import chat, compare, plot, probe, serve


@click.group(cls=NexosGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nexos")
def cli() -> None:
    """Build, boot, probe, compare and grade the NexOS teaching kernel."""


for command in (build, run, probe, chat, compare, grade, plot, serve, fuzz, model, lab, doctor):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")
