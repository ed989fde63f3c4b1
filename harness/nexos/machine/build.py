"""Build kernel and images with the project's Makefile, one configuration per make run."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from nexos.machine.config import BuildConfig
from nexos.machine.limits import make_assignments
from nexos.machine.toolchain import find_gcc, find_toolchain

MAX_PARALLEL = 2  # the machine is shared; never more than two makes at a time


class BuildError(RuntimeError):
    """make failed. `excerpt` holds the compiler's error lines with a little context."""

    def __init__(self, message: str, excerpt: str = "") -> None:
        super().__init__(message)
        self.excerpt = excerpt


@dataclass(frozen=True)
class BuildResult:
    config: BuildConfig
    ok: bool
    seconds: float
    build_dir: Path
    output: str    # make's combined stdout/stderr
    excerpt: str   # error lines (empty on success)

    @property
    def last_error(self) -> str:
        """make's own last error line (empty on success): what a table shows."""
        return "" if self.ok else last_error_line(self.output or self.excerpt)


def make_command(repo: Path, config: BuildConfig, llm: bool = False,
                 extra: tuple[str, ...] = ()) -> list[str]:
    """The make invocation for one configuration (default target, plus `llm` if asked), with
    the cross compiler the harness found as TOOLPREFIX (none found: make says so itself)."""
    gcc = find_gcc()
    toolprefix = [f"TOOLPREFIX={gcc[0]}"] if gcc else []
    cmd = [*make_base(repo), *toolprefix, *config.make_vars(), *extra]
    if llm:
        cmd.append("llm")
    return cmd


def make_base(repo: Path) -> list[str]:
    """make in the checkout, with this interpreter as the Makefile's PYTHON: the one that runs
    the harness has the packages that the model rules need (the system python3 may not)."""
    return ["make", "-C", str(repo), f"PYTHON={sys.executable}"]


def error_excerpt(output: str, context: int = 2, limit: int = 40) -> str:
    """Lines with `error:` (or make's `*** ... Error`) and `context` lines around each."""
    lines = output.splitlines()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        low = line.lower()
        if "error:" in low or "*** " in line or "undefined reference" in low:
            keep.update(range(max(0, i - context), min(len(lines), i + context + 1)))
    if not keep:
        return "\n".join(lines[-15:])
    picked, prev = [], -2
    for i in sorted(keep):
        if i != prev + 1 and picked:
            picked.append("...")
        picked.append(lines[i])
        prev = i
    return "\n".join(picked[:limit])


# make's summary of a failed recipe (`make: *** [Makefile:219: x] Error 1`) and its folder
# notes say nothing of the cause; the line before them does.
MAKE_NOISE_RE = re.compile(r"^make(\[\d+\])?: (\*\*\* \[.*\] Error \d+|\*\*\* Waiting|"
                           r"(Entering|Leaving) directory)")
CAUSE_RE = re.compile(r"error|^make(\[\d+\])?: |no such file|\*\*\* ", re.I)


def last_error_line(output: str) -> str:
    """The last line of make's output that states a cause: a compiler's `error:`, a
    Makefile's own message (`make: no SmolLM2...`, `Makefile:30: *** LAZY_ALLOC must be...`,
    `MODEL: no such file`); else the last line that is not make's summary."""
    lines = [ln.strip() for ln in output.splitlines()
             if ln.strip() and not MAKE_NOISE_RE.match(ln.strip())]
    causes = [ln for ln in lines if CAUSE_RE.search(ln)]
    return (causes or lines or ["make failed"])[-1]


def expected_outputs(repo: Path, config: BuildConfig, llm: bool) -> list[Path]:
    d = config.build_dir(repo)
    files = [d / "kernel", d / "fs.img"]
    if llm:
        files.append(d / "fs-llm.img")
    return files


def build_one(repo: Path, config: BuildConfig, llm: bool = False,
              extra: tuple[str, ...] = ()) -> BuildResult:
    """Run make for one configuration; ok only if make succeeded and the outputs exist."""
    t0 = time.monotonic()
    proc = subprocess.run(make_command(repo, config, llm, extra), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    out = proc.stdout
    ok = proc.returncode == 0
    excerpt = "" if ok else error_excerpt(out)
    if ok:
        missing = [str(p) for p in expected_outputs(repo, config, llm) if not p.is_file()]
        if missing:
            ok, excerpt = False, "make succeeded but did not produce " + ", ".join(missing)
    return BuildResult(config, ok, time.monotonic() - t0, config.build_dir(repo), out, excerpt)


def default_model(repo: Path) -> Path | None:
    """The checkpoint the checkout's Makefile puts on the LLM image by default (its
    DEFAULT_MODEL, under build/models/), or None if the Makefile names none."""
    name = make_assignments((repo / "Makefile").read_text(errors="replace")).get("DEFAULT_MODEL")
    return None if name is None else repo / name


def prebuild_shared(repo: Path, llm: bool) -> BuildResult | None:
    """Make the files that every configuration shares (the default LLM checkpoint under
    build/models/, and its prepared form under build/models/prepared/, which the image
    carries) once, before configurations are built in parallel: two makes must not write
    the same file at once. None when there is nothing to do."""
    if not llm:
        return None
    model = default_model(repo)
    if model is None:
        return None
    prepared = model.parent / "prepared" / model.name
    if model.is_file() and prepared.is_file():
        return None
    t0 = time.monotonic()
    proc = subprocess.run([*make_base(repo), str(model.relative_to(repo)),
                           str(prepared.relative_to(repo))],
                          stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    ok = proc.returncode == 0
    return BuildResult(BuildConfig(1, 1), ok, time.monotonic() - t0, model,
                       proc.stdout, "" if ok else error_excerpt(proc.stdout))


def build_all(repo: Path, configs: list[BuildConfig], llm: bool = False,
              console: Console | None = None, quiet: bool = False,
              extra: tuple[str, ...] = ()) -> list[BuildResult]:
    """Build every configuration, at most MAX_PARALLEL at a time, with a progress display.
    Returns the results in the order of `configs` (failures included; nothing raised).
    Configurations that differ only in what a boot chooses (RAM, harts, swap) share one build
    folder, made once: two makes must never write one folder at once."""
    find_toolchain(need_qemu=False)
    console = console or Console(stderr=True)
    firsts: dict[str, BuildConfig] = {}
    for c in configs:
        firsts.setdefault(c.folder, c)
    unique = list(firsts.values())
    if len(unique) > 1:
        with console.status("make the shared LLM checkpoint", spinner="dots"):
            shared = prebuild_shared(repo, llm)
        if shared is not None and not shared.ok:
            return [BuildResult(c, False, shared.seconds, c.build_dir(repo), shared.output,
                                shared.excerpt) for c in configs]
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, disable=quiet, transient=False) as progress:
        def job(cfg: BuildConfig) -> BuildResult:
            task = progress.add_task(f"make {' '.join(cfg.make_vars())}"
                                     + (" llm" if llm else ""), total=1)
            res = build_one(repo, cfg, llm, extra)
            mark = "[green]ok[/]" if res.ok else "[red]FAILED[/]"
            progress.update(task, completed=1,
                            description=f"{cfg.folder}{' (llm)' if llm else ''}: {mark}")
            return res
        with ThreadPoolExecutor(max_workers=MAX_PARALLEL) as pool:
            results = list(pool.map(job, unique))
    by_folder = {r.config.folder: r for r in results}
    return [replace(by_folder[c.folder], config=c) for c in configs]


def ensure_built(repo: Path, configs: list[BuildConfig], llm: bool = False,
                 console: Console | None = None, quiet: bool = False) -> None:
    """Build; raise BuildError with the first failure's error lines if any build failed."""
    failed = [r for r in build_all(repo, configs, llm, console, quiet) if not r.ok]
    if failed:
        names = ", ".join(r.config.name for r in failed)
        raise BuildError(f"build failed for {names}: {failed[0].last_error}", failed[0].excerpt)


def host_program(repo: Path, target: str) -> Path:
    """Make `target`, a program the Makefile builds for the host (such as build/host/smolserve),
    and return its path; BuildError with make's error lines if it does not build."""
    proc = subprocess.run([*make_base(repo), "-s", target], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    if proc.returncode != 0:
        raise BuildError(f"make {target} failed: {last_error_line(proc.stdout)}",
                         error_excerpt(proc.stdout))
    return repo / target
