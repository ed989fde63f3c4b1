"""What the `nexos` commands share: one-line errors, the common options, the checkout built
on demand, output files checked before the long work."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nexos.machine.build import BuildError, ensure_built
from nexos.machine.config import (
    DEFAULT_MEMSIZE,
    MAX_CPUS,
    MAX_SWAPSIZE,
    BuildConfig,
    ConfigError,
    find_repo,
    llm_cpus,
)
from nexos.machine.qemu import QemuError, kill_all
from nexos.machine.toolchain import ToolchainError, find_toolchain
from nexos.parse import ParseError
from nexos.programs.compare import ProbeFailed
from nexos.programs.tables import write_text

err = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 1) -> None:
    """Print one line on stderr and exit."""
    click.echo(f"nexos: error: {message}", err=True)
    sys.exit(code)


def bit_option(name: str, default: int, what: str) -> Any:
    return click.option(name, type=click.IntRange(0, 1), default=default, show_default=True,
                        help=what)


lazy_opt = bit_option("--lazy", 1, "LAZY_ALLOC (lazy sbrk).")
cow_opt = bit_option("--cow", 1, "COW_ALLOC (copy-on-write fork).")
mem_opt = click.option("--mem", "memsize", type=int, default=DEFAULT_MEMSIZE,
                       show_default=True, help="Guest RAM in MiB (MEMSIZE).")
cpus_opt = click.option("--cpus", type=click.IntRange(1, MAX_CPUS), default=1, show_default=True,
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


class OptionError(click.ClickException):
    """A bad option value, reported as `nexos: error: <message>` with exit status 2."""

    exit_code = 2


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
