"""The `nexos` command line: one group over each product's commands (machine/cli.py,
programs/cli.py, course/cli.py, model/cli.py, course/lab/cli.py, `doctor`), with one-line
errors. It only wires the other modules together."""

from __future__ import annotations

import sys
from typing import Any

import click

from nexos.clikit import fail
from nexos.course.cli import grade
from nexos.course.lab.cli import lab
from nexos.machine.build import BuildError
from nexos.machine.cli import build, run
from nexos.machine.config import ConfigError
from nexos.machine.doctor import doctor
from nexos.machine.qemu import QemuError, kill_all
from nexos.machine.toolchain import ToolchainError
from nexos.model.cli import model
from nexos.parse import ParseError
from nexos.programs.cli import chat, compare, plot, probe, serve
from nexos.programs.compare import ProbeFailed


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


@click.group(cls=NexosGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nexos")
def cli() -> None:
    """Build, boot, probe, compare and grade the NexOS teaching kernel."""


for command in (build, run, probe, chat, compare, grade, plot, serve, model, lab, doctor):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="nexos")
