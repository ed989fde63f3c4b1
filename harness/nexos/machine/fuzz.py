"""`nexos fuzz`: the system-call fuzzer (user/tests/fuzz.c, docs/fuzz.md) in each chosen
kernel configuration.

One job: boot a configuration, run `fuzz --seed S --procs P --seconds T` in its shell, and
read what it printed into records (nexos.records' FuzzResult and FuzzRecord). A clean run
has no FAIL line, no process killed by the kernel, every page, swap slot and page-cache
page back, and ALL TESTS PASSED. A kernel panic or a hang (no prompt in time) fails that
configuration with the console's tail as evidence, and every record carries one line that
runs the same again. The click command is here too, beside what it runs (as `nexos
doctor`'s is).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from nexos.clikit import OptionError, err, mem_opt, nobuild_opt, out, prepare, swap_opt
from nexos.machine.config import (
    ALL_CONFIGS,
    DEFAULT_MEMSIZE,
    MAX_CPUS,
    BuildConfig,
    ConfigError,
    host_cores,
)
from nexos.machine.limits import CHECKOUT, read_defines
from nexos.machine.qemu import KernelPanic, QemuError, QemuExited, QemuSession, QemuTimeout
from nexos.parse import ParseError, find_panic, find_usertraps, parse_test_verdict
from nexos.records import FuzzRecord, FuzzResult, FuzzSummary

MAX_PROCS = read_defines(CHECKOUT / "user" / "tests" / "fuzz.c", ("MAXPROCS",))["MAXPROCS"]
DEFAULT_MINUTES = 0.25   # a short run in each of the four configurations (docs/fuzz.md)
MAX_MINUTES = 24 * 60
DEFAULT_SEED = 1
DEFAULT_PROCS = 4
FUZZ_CPUS = 2            # harts, where the host has the cores: two harts race in the kernel

START_RE = re.compile(
    r"^fuzz: start seed=(?P<seed>\d+) procs=(?P<procs>\d+) ops=(?P<ops>\d+) "
    r"seconds=(?P<seconds>\d+) lazy=(?P<lazy>\d) cow=(?P<cow>\d) harts=(?P<harts>\d+) "
    r"total_pages=(?P<total_pages>\d+) swap_slots=(?P<swap_slots>\d+)$", re.M)
DONE_RE = re.compile(
    r"^fuzz: done seed=\d+ procs=\d+ calls=(?P<calls>\d+) forks=(?P<forks>\d+) "
    r"kills=(?P<kills>\d+) failures=(?P<failures>\d+) faults_killed=(?P<faults_killed>\d+) "
    r"leaked_pages=(?P<leaked_pages>-?\d+) leaked_cache=(?P<leaked_cache>-?\d+) "
    r"swap_slots_used=(?P<swap_slots_before>\d+)->(?P<swap_slots_after>\d+) "
    r"swap_outs=(?P<swap_outs>\d+) swap_ins=(?P<swap_ins>\d+) seconds=(?P<seconds>\d+)$",
    re.M)
FAIL_RE = re.compile(r"^fuzz: FAIL .*$", re.M)
LEAKCHECK_RE = re.compile(r"^test leakcheck: (OK|FAILED)", re.M)
# The kernel's own lines that the fuzzer provokes (kernel/syscall.c, fs.c, trap.c, oom.c). The
# kernel prints them straight to the UART, so one may land inside a line of fuzz's: they
# are taken out before fuzz's lines are read (and usertrap lines counted first).
KERNEL_LINE_RE = re.compile(
    r"[0-9]+ [^ \n]+: unknown sys call -?[0-9]+\n|iget: inode table full\n|"
    r"ialloc: no inodes\n|balloc: out of blocks\n|"
    r"usertrap: pid [0-9]+ \([^)\n]*\) killed: [^\n]*\n")


# --------------------------------------------------------------------------- parsing

def parse_fuzz(text: str) -> FuzzResult:
    """fuzz's lines in one run's console output (docs/fuzz.md, "Output"). A run cut short
    has no summary and fails the verdict; ParseError when there is no `fuzz: start` line
    (this is not fuzz's output)."""
    text = KERNEL_LINE_RE.sub("", text.replace("\r", ""))
    start = START_RE.search(text)
    if start is None:
        raise ParseError("no `fuzz: start seed=.. procs=.. ...` line (docs/fuzz.md)", text)
    done = DONE_RE.search(text)
    summary = FuzzSummary(**{k: int(v) for k, v in done.groupdict().items()}) if done else None
    leak = LEAKCHECK_RE.findall(text)
    try:
        passed = parse_test_verdict(text).passed
    except ParseError:
        passed = False
    return FuzzResult(**{k: int(v) for k, v in start.groupdict().items()}, summary=summary,
                      fails=tuple(m.group(0).strip() for m in FAIL_RE.finditer(text)),
                      leakcheck=leak[-1] == "OK" if leak else None, passed=passed)


def problem_of(res: FuzzResult, usertraps: int) -> str | None:
    """Why a complete run is not clean, or None: its first FAIL line, a process the kernel
    killed, memory not given back, a missing summary, or the failed verdict."""
    s = res.summary
    if res.fails:
        return res.fails[0].removeprefix("fuzz: ")
    if s is None:
        return "no `fuzz: done` line: the run was cut short"
    if s.faults_killed or usertraps:
        return f"the kernel killed {max(s.faults_killed, usertraps)} process(es) (usertrap:)"
    if s.leaked_pages or s.leaked_cache:
        return (f"memory not given back: {s.leaked_pages} free pages (net of swap), "
                f"{s.leaked_cache} page-cache pages")
    if not res.passed or not res.leakcheck:
        return "SOME TESTS FAILED"
    return None


# --------------------------------------------------------------------------- running

def fuzz_command(seed: int, procs: int, seconds: int, hog: bool = False) -> str:
    """The guest command line; `hog`: with a process that keeps memory short (for a boot
    with swap: the workers' pages go out and come back while they run)."""
    return f"fuzz --seed {seed} --procs {procs} --seconds {seconds}" + (" --hog" if hog else "")


def time_limit(seconds: int) -> float:
    """How long a run of `seconds` may take before it counts as a hang: the run, then its
    children ending and the removal of its files (seconds on a busy host), with room."""
    return seconds * 1.5 + 90


def repro_line(cfg: BuildConfig, guest: str) -> str:
    """A host command that boots cfg and runs `guest` (nexos run)."""
    words = ["nexos", "run", "--lazy", str(cfg.lazy), "--cow", str(cfg.cow), "--cpus",
             str(cfg.cpus)]
    if cfg.swapsize:
        words += ["--swap", str(cfg.swapsize)]
    if cfg.memsize != DEFAULT_MEMSIZE:
        words += ["--mem", str(cfg.memsize)]
    return " ".join([*words, "--", shlex.quote(guest)])


def fuzz_record(cfg: BuildConfig, command: str, seconds: float, output: str,
                error: QemuError | None = None) -> FuzzRecord:
    """The record of one run from its console output, and the session's error if one ended
    it (a KernelPanic, a QemuTimeout: a hang, another QemuError)."""
    text = output.replace("\r", "")
    panic = find_panic(text)
    if isinstance(error, KernelPanic):
        panic = panic or str(error).removeprefix("kernel ")
    hang = isinstance(error, QemuTimeout)
    traps = len(find_usertraps(text))
    result: FuzzResult | None = None
    problem: str | None = None
    try:
        result = parse_fuzz(text)
    except ParseError as e:
        problem = str(e)
    if panic:
        problem = f"kernel {panic}"
    elif hang:
        problem = f"hang: {error}"
    elif error is not None:
        problem = str(error)
    elif result is not None:
        problem = problem_of(result, traps)
    guest = (result.repro if result is not None else None) or command
    return FuzzRecord(cfg.name, cfg.lazy, cfg.cow, cfg.cpus, cfg.swapsize, command, seconds,
                      result, panic, hang, traps, problem, repro_line(cfg, guest),
                      text[-3000:] if problem else "")


Session = Callable[[BuildConfig, float], AbstractContextManager[QemuSession]]


def run_fuzz(cfg: BuildConfig, repo: Path, seconds: int, seed: int, procs: int,
             session: Session | None = None) -> FuzzRecord:
    """Boot cfg, run the fuzzer for `seconds`, and return its record. A panic, a hang or
    QEMU's death, at boot or in the run, is a failed record; so is output that is not
    fuzz's. `session` opens the QEMU session (cfg, its lifetime); a kernel that is not built
    is a QemuError for the caller."""
    command = fuzz_command(seed, procs, seconds, hog=cfg.swapsize > 0)
    limit = time_limit(seconds)
    opener = session or (lambda c, life: QemuSession.for_config(c, repo, lifetime=life))
    t0 = time.monotonic()
    try:
        with opener(cfg, limit + 300) as s:
            res = s.run(command, limit)
    except (KernelPanic, QemuTimeout, QemuExited) as e:
        return fuzz_record(cfg, command, time.monotonic() - t0, e.evidence, e)
    return fuzz_record(cfg, command, time.monotonic() - t0, res.output)


# --------------------------------------------------------------------------- showing

def fuzz_table(records: list[FuzzRecord], caption: str) -> Table:
    """One row per configuration: what the fuzzer did, what it left behind, whether it was
    clean. `leaked pages` are free pages (net of swap) and page-cache pages that did not
    come back; `swap slots` the slots in use before and after (pages of the shell or init
    may stay in swap: the balance counts them)."""
    t = Table(title="nexos fuzz: random system calls with hostile arguments",
              caption=caption, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("kernel", no_wrap=True)
    for name in ("harts", "swap\nMiB", "secs", "calls", "forks", "kills", "panics", "hangs",
                 "leaked\npages", "swap\nslots"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("verdict")
    for r in records:
        s = r.result.summary if r.result else None
        cells = ([str(s.calls), str(s.forks), str(s.kills)] if s else ["-"] * 3)
        cells += [str(int(r.panic is not None)), str(int(r.hang))]
        cells += ([str(s.leaked_pages + s.leaked_cache),
                   f"{s.swap_slots_before}->{s.swap_slots_after}"] if s else ["-", "-"])
        verdict = (f"[red]{escape(r.problem[:70])}[/red]" if r.problem is not None
                   else "[green]clean[/green]")
        t.add_row(r.config, str(r.cpus), str(r.swap), f"{r.seconds:.0f}", *cells, verdict)
    return t


def show_failures(records: list[FuzzRecord]) -> None:
    """Under the table, for each failed configuration: its problem, the console's tail and
    the repro line."""
    for r in records:
        if r.problem is None:
            continue
        out.print(f"[bold]{r.config}:[/bold] {escape(r.problem)}", highlight=False)
        out.print(r.evidence[-1500:].rstrip(), markup=False, highlight=False)
        out.print(f"repro: {r.repro}", markup=False, highlight=False)


# --------------------------------------------------------------------------- the command

def config_list(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                ) -> list[tuple[int, int]]:
    """--configs values (names or shorthands, by commas or spaces, or repeated) -> (lazy,
    cow) pairs in order, each once; none given: all four."""
    pairs: list[tuple[int, int]] = []
    for value in values:
        pieces = value.replace(",", " ").split()
        if not pieces:
            raise OptionError(f"--configs: {value!r} names no configuration")
        for piece in pieces:
            try:
                cfg = BuildConfig.parse(piece)
            except ConfigError as e:
                raise OptionError(f"--configs: {e}") from None
            pairs.append((cfg.lazy, cfg.cow))
    return list(dict.fromkeys(pairs or ALL_CONFIGS))


def fuzz_cpus() -> int:
    """FUZZ_CPUS harts where the host has that many cores, else 1."""
    return min(FUZZ_CPUS, host_cores())


@click.command()
@click.option("--minutes", type=click.FloatRange(0, MAX_MINUTES, min_open=True),
              default=DEFAULT_MINUTES, show_default=True,
              help="How long the fuzzer runs in each configuration.")
@click.option("--configs", "configs", multiple=True, callback=config_list,
              help="Configurations (lazy1-cow0, 10, ...), by commas or spaces or repeated; "
                   "default all four.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=DEFAULT_SEED,
              show_default=True, help="The workers' random streams derive from it.")
@click.option("--procs", type=click.IntRange(1, MAX_PROCS), default=DEFAULT_PROCS,
              show_default=True, help="Worker processes at once.")
@click.option("--cpus", type=click.IntRange(1, MAX_CPUS), default=fuzz_cpus(),
              show_default=True, help="Harts (-smp).")
@click.option("--jobs", type=click.IntRange(1), default=host_cores(), show_default=True,
              help="Configurations fuzzed at once, each in its own QEMU (default: the "
                   "host's cores).")
@swap_opt
@mem_opt
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@nobuild_opt
def fuzz(minutes: float, configs: list[tuple[int, int]], seed: int, procs: int, cpus: int,
         jobs: int, swapsize: int, memsize: int, as_json: bool, no_build: bool) -> None:
    """Random system calls with hostile arguments from several processes (user/tests/fuzz.c),
    then a check that every page, swap slot and page-cache page came back; per
    configuration. Exit status 1 when any configuration is not clean (a FAIL line, a
    process the kernel killed, a leak, a panic, a hang); each failure comes with a line
    that runs it again. docs/fuzz.md."""
    seconds = max(1, round(minutes * 60))
    cfgs = [BuildConfig(lazy, cow, memsize, cpus, swapsize) for lazy, cow in configs]
    repo = prepare(cfgs, False, no_build)

    def one(cfg: BuildConfig) -> FuzzRecord:
        rec = run_fuzz(cfg, repo, seconds, seed, procs)
        mark = ("[green]clean[/green]" if rec.problem is None
                else f"[red]{escape(rec.problem)}[/red]")
        err.print(f"{cfg.name}: {mark} ({rec.seconds:.0f}s)", highlight=False, soft_wrap=True)
        return rec
    # a run is timed, not counted: side by side, the configurations take less wall time
    # (each QEMU dies with the thread that started it, after its run)
    with ThreadPoolExecutor(max_workers=min(jobs, len(cfgs))) as pool:
        records = list(pool.map(one, cfgs))
    if as_json:
        click.echo(json.dumps([r.to_json() for r in records], indent=2))
    else:
        guest = fuzz_command(seed, procs, seconds, hog=swapsize > 0)
        out.print(fuzz_table(records, f"guest: {guest}, {cpus} hart(s), swap {swapsize} MiB"))
        show_failures(records)
    sys.exit(1 if any(r.failed for r in records) else 0)
