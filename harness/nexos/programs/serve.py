"""`nexos serve`: run one smolserve command on kernel configurations and turn each run into
a ServeRecord (the rows of `nexos serve`, docs/harness.md); the workload options and files
that the command passes to smolserve (docs/smolserve.md, "Workloads").

The parser is nexos.parse.smolserve (the schema of docs/smolserve.md, "Output"), the records
are nexos.records' Serve* classes. The runner is given a way to open a shell on a
configuration (the command line passes one made from nexos.machine.qemu.QemuSession), so the tests
of the runner need no QEMU.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nexos.machine.config import BuildConfig
from nexos.machine.limits import LLM_MAX_DIM
from nexos.machine.limits import SMOLSERVE_MAX_CHAT as MAX_CHAT
from nexos.machine.limits import (
    SMOLSERVE_MAX_FILE as MAX_FILE,  # smolserve's limits (docs/smolserve.md)
)
from nexos.machine.limits import SMOLSERVE_MAX_ID as MAX_ID
from nexos.machine.limits import SMOLSERVE_MAX_PROMPT as MAX_PROMPT
from nexos.machine.limits import SMOLSERVE_MAX_REQUESTS as MAX_REQUESTS
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
MAX_LEN_LIMIT, MAX_TOKEN_ID = LLM_MAX_DIM, 10**9  # the C side's; the parser's bound on an id
_ID_RE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID}}}")
_NUM_RE = re.compile(r"[0-9]{1,15}")
_IDS = r"[0-9]{1,10}(,[0-9]{1,10})*"
_PROMPT_RE = re.compile(rf"{_IDS}(:{_IDS})?")
# a chat-style line: id max_len "message" end (the message's words one space apart)
_CHAT_LINE_RE = re.compile(r'(\S+) +(\S+) +"([^"]*)"(.*)')



@dataclass(frozen=True)
class WorkloadRequest:
    """One line of a workload file: `id max_len prompt gen=N|eos` (gen None: eos). The
    prompt is token ids, the first `prefix` of them a prefix that other requests may
    share, or a chat message (`chat`; `prompt` then empty: smolserve makes it)."""

    id: str
    max_len: int
    prompt: tuple[int, ...]
    gen: int | None
    prefix: int = 0
    chat: str | None = None

    def line(self) -> str:
        """The line as smolserve reads it, fields one space apart."""
        end = "eos" if self.gen is None else f"gen={self.gen}"
        if self.chat is not None:
            return f'{self.id} {self.max_len} "{self.chat}" {end}'
        ids = [str(t) for t in self.prompt]
        if self.prefix:
            ids = [",".join(ids[:self.prefix]) + ":" + ",".join(ids[self.prefix:])]
        return f"{self.id} {self.max_len} {','.join(ids)} {end}"


@dataclass(frozen=True)
class ServeWorkload:
    """What `nexos serve`'s workload options resolve to: smolserve's flags; the workload
    file on the host that must first be written into the guest as GUEST_WORKLOAD
    (read_workload, workload_commands), None for a built-in or generated workload; and,
    when no workload was given, the line that says which one runs."""

    args: list[str]
    file: Path | None = None
    note: str | None = None


def _chat_message(raw: str, where: str) -> tuple[list[str], str | None]:
    """A line's fields, with a chat message ("...", spaces allowed) as one field, and the
    message (None for a line of token ids). ValueError for a message smolserve or the
    NexOS shell would refuse."""
    m = _CHAT_LINE_RE.fullmatch(raw.strip())
    if m is None:
        return [f for f in raw.split(" ") if f], None
    words = m[3].split()
    message = " ".join(words)
    if not message or len(message) > MAX_CHAT:
        raise ValueError(f'{where}: a chat message is 1-{MAX_CHAT} characters between two \'"\'')
    if "'" in message:
        raise ValueError(f"{where}: a chat message cannot hold a ' (the NexOS shell writes "
                         "it into the guest between two ')")
    return [m[1], m[2], f'"{message}"', *m[4].split()], message


def _request(fields: list[str], chat: str | None, where: str) -> WorkloadRequest:
    """One request line's fields -> a WorkloadRequest; ValueError `<where>: <why>` with
    smolserve's own reasons (user/smolserve/workload.c, parse_line)."""
    expected = "expected: id max_len prompt gen=N|eos"
    if not _ID_RE.fullmatch(fields[0]):
        raise ValueError(f"{where}: the id must be 1-{MAX_ID} characters of "
                         "A-Z a-z 0-9 _ -")
    if len(fields) < 4:
        raise ValueError(f"{where}: {expected}")
    if len(fields) > 4:
        raise ValueError(f"{where}: extra text after the end field")
    rid, max_len, prompt, end = fields
    if not _NUM_RE.fullmatch(max_len) or not 1 <= int(max_len) <= MAX_LEN_LIMIT:
        raise ValueError(f"{where}: max_len must be a number from 1 to {MAX_LEN_LIMIT}")
    shared, _, own = prompt.rpartition(":")
    ids = (shared.split(",") if shared else []) + own.split(",")
    if chat is None and (not _PROMPT_RE.fullmatch(prompt) or len(ids) > MAX_PROMPT
                         or max(int(t) for t in ids) > MAX_TOKEN_ID):
        raise ValueError(f"{where}: the prompt must be 1-{MAX_PROMPT} comma-separated "
                         "token ids, a ':' after a shared prefix")
    gen: int | None = None
    if end != "eos":
        n = end.removeprefix("gen=")
        if n == end:
            raise ValueError(f"{where}: the end must be gen=N or eos")
        if not _NUM_RE.fullmatch(n) or int(n) > MAX_LEN_LIMIT:
            raise ValueError(f"{where}: gen=N needs a number N >= 0")
        gen = int(n)
    if chat is not None:   # its tokens are the model's to count
        return WorkloadRequest(rid, int(max_len), (), gen, chat=chat)
    if len(ids) + (gen or 0) > int(max_len):
        raise ValueError(f"{where}: prompt ({len(ids)}) + generated ({gen or 0}) exceeds "
                         f"max_len {max_len}")
    return WorkloadRequest(rid, int(max_len), tuple(int(t) for t in ids), gen,
                           len(shared.split(",")) if shared else 0)


def parse_workload(text: str, name: str) -> list[WorkloadRequest]:
    """The requests of a workload file's text (docs/smolserve.md "Workloads": blank lines
    and lines starting with `#` skipped, fields apart by spaces or tabs). ValueError
    `<name>:<line>: <why>` at the first bad line, `<name>: no requests` for none."""
    out: list[WorkloadRequest] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r").replace("\t", " ")
        first = line.split()
        if not first or first[0].startswith("#"):
            continue
        where = f"{name}:{n}"
        if len(out) == MAX_REQUESTS:
            raise ValueError(f"{where}: more than {MAX_REQUESTS} requests")
        fields, chat = _chat_message(line, where)
        req = _request(fields, chat, where)
        if req.id in seen:
            raise ValueError(f"{where}: two requests with the same id {req.id}")
        seen.add(req.id)
        out.append(req)
    if not out:
        what = "an empty file" if not text.strip() else "no requests"
        raise ValueError(f"{name}: {what} (a workload file has a request a line: "
                         "id max_len prompt gen=N|eos)")
    return out


def read_workload(path: str | Path) -> list[WorkloadRequest]:
    """The requests of the workload file at `path` on the host. ValueError `<path>: <why>`
    (one line) for a file that is missing, a folder, unreadable, too long, not text, or
    not a workload."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(data) >= MAX_FILE:
        raise ValueError(f"{path}: {len(data)} bytes; a workload file is shorter than "
                         f"{MAX_FILE // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not text (a workload file is lines of "
                         "`id max_len prompt gen=N|eos`)") from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise ValueError(f"{path}:{line}: not text (a NUL byte)")
    return parse_workload(text, str(path))


def workload_commands(requests: Sequence[WorkloadRequest], dest: str = GUEST_WORKLOAD
                      ) -> list[str]:
    """NexOS shell commands that write `requests` to `dest` in the guest, a line each (the
    first truncates the file). The words are ids, numbers and `gen=`, which need no
    quoting; a chat message with its two " goes between two ' (the shell's quotes)."""
    def words(r: WorkloadRequest) -> str:
        line = r.line()
        if r.chat is None:
            return line
        head, _, tail = line.partition(' "')
        message, _, end = tail.rpartition('" ')
        return f"""{head} '"{message}"' {end}"""
    return [f"echo {words(r)} {'>' if i == 0 else '>>'} {dest}"
            for i, r in enumerate(requests)]


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
# 3.4x the free pages of a PRESSURE_MEMSIZE guest (docs/smolserve.md, "Overcommit").
PRESSURE_WORKLOADS = (("short", 48, 256), ("medium", 12, 1024), ("long", 6, 2048))
PRESSURE_MEMSIZE = 256
# Admit past what fits, and make every first attempt fill its reservation once its prompt is
# fed, as a long answer would: without it answers of a few tokens never meet the memory they
# ask. The answers keep smolserve's default length (1..16 tokens), so that a filled short
# request lives long enough to overlap the others: with one-token answers the 48 short ones
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

