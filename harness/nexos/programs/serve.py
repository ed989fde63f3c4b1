"""`nexos serve`: run one smolserve command on kernel configurations and turn each run into
a ServeRecord (the rows of `nexos serve`, docs/harness.md); the workload options and files
that the command passes to smolserve (docs/smolserve.md, "Workloads").

The parser is nexos.parse.smolserve (the schema of docs/smolserve.md, "Output"), the records
are nexos.records' Serve* classes. The runner is given a way to open a shell on a
configuration (the command line passes one made from nexos.machine.qemu.QemuSession), so the tests
of the runner need no QEMU.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nexos.machine.config import BuildConfig
from nexos.parse import ParseError, find_panic, parse_serve
from nexos.records import ServeRecord, ServeResult, SwapComparison

# --------------------------------------------------------------------------- the timeline

def concurrency(result: ServeResult) -> list[tuple[float, int, int]]:
    """(seconds, running requests, pages in use): at the baseline (nothing running), then
    after each event, in time order."""
    start = [] if result.start is None else [
        (0.0, 0, result.start.total_pages - result.start.free_pages)]
    return start + [(e.t_ms / 1000.0, e.running, e.used_pages) for e in result.events]


# --------------------------------------------------------------------------- the runner

class Output(Protocol):
    @property
    def output(self) -> str: ...


class Shell(Protocol):
    """What the runner needs of a booted kernel (nexos.machine.qemu.QemuSession is one)."""

    def run(self, cmd: str, timeout: float = ...) -> Output: ...


OpenShell = Callable[[int, int, int], AbstractContextManager[Shell]]
# (lazy, cow, cpus, swap MiB) -> a booted shell, for --swap's pairs of boots
OpenSwapShell = Callable[[int, int, int, int], AbstractContextManager[Shell]]
ShellErrors = tuple[type[BaseException], ...]


# ---------------------------------------------------------------- the workload options

DEFAULT_REQUESTS, DEFAULT_MAX_LEN = 32, 2048  # the README's workload: no workload given
BUILTIN_WORKLOADS = ("seed32",)
GUEST_WORKLOAD = "/workload"  # where a workload file from the host is written in the guest
SMOLSERVE_ERROR = "[smolserve] error: "


@dataclass(frozen=True)
class ServeWorkload:
    """What `nexos serve`'s workload options resolve to: smolserve's flags; the workload
    file on the host that must first be written into the guest as GUEST_WORKLOAD
    (check_workload, workload_commands), None for a built-in or generated workload; and,
    when no workload was given, the line that says which one runs."""

    args: list[str]
    file: Path | None = None
    note: str | None = None


def check_workload(path: str | Path, smolserve: Path) -> list[str]:
    """The requests of the workload file at `path` on the host, a line each, as
    `smolserve --check-workload` prints them: `smolserve` is smolserve built for the host
    (build/host/smolserve), so the file is read by the guest's own parser
    (user/smolserve/workload.c), its one home. ValueError `<path>[:<line>]: <why>` (one
    line) for a file that cannot be read, is not a workload, or cannot be typed into the
    NexOS shell."""
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        proc = subprocess.run([str(smolserve), "--check-workload", str(path)],
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError(f"{path}: {smolserve} --check-workload did not run ({e})") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1].removeprefix(SMOLSERVE_ERROR) if said else f"exit status {proc.returncode}"
        raise ValueError(why if why.startswith(str(path)) else f"{path}: {why}")
    try:
        lines = proc.stdout.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not text (a chat message that is not UTF-8)") from None
    for line in lines:
        if "'" in line:
            raise ValueError(f"{path}: request {line.split(' ', 1)[0]}: a chat message cannot "
                             "hold a ' (each line is typed into the NexOS shell between two ')")
    return lines


def workload_commands(lines: Sequence[str], dest: str = GUEST_WORKLOAD) -> list[str]:
    """NexOS shell commands that write the workload `lines` (check_workload's) to `dest` in
    the guest, a line each between the shell's quotes (the first truncates the file)."""
    return [f"echo '{line}' {'>' if i == 0 else '>>'} {dest}" for i, line in enumerate(lines)]


def serve_workload(workload: str | None, requests: int | None, max_len: int | None,
                   seed: int | None = None, long_len: int | None = None,
                   prefix_len: int | None = None, share_prefix: bool = True) -> ServeWorkload:
    """Resolve `nexos serve`'s workload options (None: not given): a built-in workload
    (seed32), a workload file on the host (not read here: see ServeWorkload.file), or a
    generated one (both --requests and --max-len; --seed, --long-len and --prefix-len go
    only with it). None of them: the README's generated workload, DEFAULT_REQUESTS x
    DEFAULT_MAX_LEN, with a note saying so. ValueError (a user mistake) for a mix or a half
    of them. share_prefix False passes `--share-prefix 0` (each request prefilled alone)."""
    generated = requests is not None or max_len is not None
    tuning = [f for f, v in (("--seed", seed), ("--long-len", long_len),
                             ("--prefix-len", prefix_len)) if v is not None]
    sharing = [] if share_prefix else ["--share-prefix", "0"]
    if workload is not None:
        if generated:
            raise ValueError("give --workload or --requests/--max-len, not both")
        if tuning:
            verb = "go" if len(tuning) > 1 else "goes"
            raise ValueError(f"{' and '.join(tuning)} {verb} with a generated workload "
                             "(--requests/--max-len), not with --workload")
        if workload in BUILTIN_WORKLOADS:
            return ServeWorkload(["--workload", workload, *sharing])
        return ServeWorkload(["--workload", GUEST_WORKLOAD, *sharing], Path(workload))
    note = None
    if not generated:
        requests, max_len = DEFAULT_REQUESTS, DEFAULT_MAX_LEN
        note = (f"nexos serve: no workload given: --requests {requests} --max-len "
                f"{max_len} (the README's)")
    if requests is None or max_len is None:
        given, missing = (("--requests", "--max-len") if max_len is None
                          else ("--max-len", "--requests"))
        raise ValueError(f"{given} needs {missing}: give both, or neither for the README's "
                         f"--requests {DEFAULT_REQUESTS} --max-len {DEFAULT_MAX_LEN}, or "
                         "--workload seed32|FILE")
    args = ["--requests", str(requests), "--max-len", str(max_len)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if long_len is not None:
        args += ["--long-len", str(long_len)]
    if prefix_len is not None:
        if prefix_len >= max_len - 1:
            raise ValueError(f"--prefix-len {prefix_len} leaves no room in --max-len {max_len} "
                             "for a token of each request's own and one generated")
        args += ["--prefix-len", str(prefix_len)]
    return ServeWorkload(args + sharing, None, note)


def serve_command(args: Sequence[str]) -> str:
    return " ".join(["smolserve", *(shlex.quote(a) for a in args)])


def run_serve(open_shell: OpenShell, lazy: int, cow: int, cpus: int, args: Sequence[str],
              timeout: float, errors: ShellErrors = (OSError,)) -> ServeRecord:
    """Boot (lazy, cow, cpus) with open_shell, run smolserve once, parse. The exceptions in
    `errors` (the session's own) become the record's problem."""
    cmd = serve_command(args)
    name = BuildConfig(lazy, cow, cpus=cpus).name
    t0 = time.monotonic()
    try:
        with open_shell(lazy, cow, cpus) as sh:
            t0 = time.monotonic()
            text = sh.run(cmd, timeout=timeout).output
    except errors as e:
        evidence = str(getattr(e, "evidence", ""))
        return ServeRecord(name, lazy, cow, cpus, cmd, time.monotonic() - t0, str(e), None,
                           evidence)
    seconds = time.monotonic() - t0
    try:
        result = parse_serve(text)
    except ParseError as e:
        return ServeRecord(name, lazy, cow, cpus, cmd, seconds, str(e), None, text[-2000:])
    # usertrap lines are workers killed for want of memory (the server runs them again;
    # a killed server would leave no SERVE_SUMMARY): only a panic is a problem here
    panic = find_panic(text)
    problem = f"kernel {panic}" if panic else None
    return ServeRecord(name, lazy, cow, cpus, cmd, seconds, problem, result,
                       text[-2000:] if problem else "")


def run_serves(open_shell: OpenShell, configs: Sequence[tuple[int, int]], cpus: int,
               args: Sequence[str], timeout: float,
               errors: ShellErrors = (OSError,)) -> list[ServeRecord]:
    """run_serve on each (lazy, cow) in turn (one QEMU at a time)."""
    return [run_serve(open_shell, lazy, cow, cpus, args, timeout, errors)
            for lazy, cow in configs]


# ------------------------------------------------------ recompute against swap (--swap)

# What `nexos serve --swap` runs when no workload is given, and bench/smolserve_swap.py: the
# same memory asked in short, medium and long requests (label, requests, max_len), each about
# 2.5x the free pages of a PRESSURE_MEMSIZE guest (docs/smolserve.md, "Overcommit"). A small
# guest that still maps the whole model: its page cache (half of RAM, docs/memory.md, 26624
# pages) holds the prepared model's 24474 pages and the harts' arena with some 2000 to
# spare (192 MiB would leave about 100 beside the model). The table is the one 256 MiB
# and twice the requests gave, in a quarter of the time.
PRESSURE_WORKLOADS = (("short", 12, 512), ("medium", 6, 1024), ("long", 3, 2048))
PRESSURE_MEMSIZE = 208
# Admit past what fits, and make every first attempt fill its reservation once its prompt is
# fed, as a long answer would: without it answers of a few tokens never meet the memory they
# ask. The answers keep smolserve's default length (1..16 tokens), so that a filled short
# request lives long enough to overlap the others: with one-token answers the short ones
# fill and finish one after another and meet no pressure at all.
PRESSURE_FLAGS = ("--overcommit", "1", "--test-fill", "1")


def pressure_workloads(load: ServeWorkload | None) -> list[tuple[str, list[str]]]:
    """(label, smolserve args) of each workload --swap compares: `load` with
    PRESSURE_FLAGS, or with None the three PRESSURE_WORKLOADS."""
    if load is not None:
        return [("given", [*load.args, *PRESSURE_FLAGS])]
    return [(label, ["--requests", str(n), "--max-len", str(max_len),
                     *PRESSURE_FLAGS])
            for label, n, max_len in PRESSURE_WORKLOADS]


def run_swap_comparisons(open_shell: OpenSwapShell, configs: Sequence[tuple[int, int]],
                         cpus: int, workloads: Sequence[tuple[str, Sequence[str]]],
                         swapsize: int, timeout: float,
                         errors: ShellErrors = (OSError,)) -> list[SwapComparison]:
    """Each workload on each (lazy, cow): a fresh boot without swap, then one with a
    `swapsize` MiB swap disk (one QEMU at a time), paired."""
    def runs(lazy: int, cow: int, args: Sequence[str], swap: int) -> ServeRecord:
        def shell(lz: int, cw: int, n: int) -> AbstractContextManager[Shell]:
            return open_shell(lz, cw, n, swap)
        return run_serve(shell, lazy, cow, cpus, args, timeout, errors)

    return [SwapComparison(label, swapsize, runs(lazy, cow, args, 0),
                           runs(lazy, cow, args, swapsize))
            for label, args in workloads for lazy, cow in configs]

