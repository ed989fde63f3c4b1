"""The `nexos` command line: one group over each product's commands (machine/cli.py,
programs/cli.py, course/cli.py, model/cli.py, course/lab/cli.py, `doctor`, `fuzz`), every
error one line (clikit.NexosGroup). It only wires the other modules together."""

from __future__ import annotations

import importlib

import click

from nexos.clikit import NexosGroup

# Each command's module, imported only when the command runs (or --help lists them all):
# a command pays for its own imports alone (`nexos model` brings numpy and gguf, `grade`
# the course's modules), and the suite starts `nexos` some 150 times.
COMMANDS = {"build": "nexos.machine.cli", "run": "nexos.machine.cli",
            "doctor": "nexos.machine.doctor", "fuzz": "nexos.machine.fuzz",
            "probe": "nexos.programs.cli", "chat": "nexos.programs.cli",
            "compare": "nexos.programs.cli", "plot": "nexos.programs.cli",
            "serve": "nexos.programs.cli", "grade": "nexos.course.cli",
            "lab": "nexos.course.lab.cli", "model": "nexos.model.cli"}


class NexosCli(NexosGroup):
    """NexosGroup over COMMANDS, each added when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS and name not in self.commands:
            self.add_command(getattr(importlib.import_module(COMMANDS[name]), name))
        return super().get_command(ctx, name)


@click.group(cls=NexosCli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nexos")
def cli() -> None:
    """Build, boot, probe, compare and grade the NexOS teaching kernel."""


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")
