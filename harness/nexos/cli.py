"""The `nexos` command line: one group over each product's commands (machine/cli.py,
programs/cli.py, course/cli.py, model/cli.py, course/lab/cli.py, `doctor`, `fuzz`), every
error one line (clikit.NexosGroup). It only wires the other modules together."""

from __future__ import annotations

import importlib

import click

from nexos.clikit import NexosGroup
from nexos.course.cli import grade
from nexos.course.lab.cli import lab
from nexos.machine.cli import build, run
from nexos.machine.doctor import doctor
from nexos.machine.fuzz import fuzz
from nexos.programs.cli import chat, compare, plot, probe, serve

# Commands imported only when they run (or --help lists them): `nexos model` brings numpy
# and gguf, half of every other command's start-up time.
LAZY_COMMANDS = {"model": "nexos.model.cli"}


class NexosCli(NexosGroup):
    """NexosGroup with the LAZY_COMMANDS listed among the others, each added when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            self.add_command(getattr(importlib.import_module(LAZY_COMMANDS[name]), name))
        return super().get_command(ctx, name)


@click.group(cls=NexosCli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nexos")
def cli() -> None:
    """Build, boot, probe, compare and grade the NexOS teaching kernel."""


for command in (build, run, probe, chat, compare, grade, plot, serve, fuzz, lab, doctor):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")
