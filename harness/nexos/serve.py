"""smolserve's output (docs/smolserve.md, "Output") as typed records, and the runner that
runs one smolserve command on kernel configurations.

The parser checks every `[smolserve] ` line against the schema: each kind has exactly its
keys, in order. Other console lines (the shell, kernel messages) are ignored; a kernel's
`usertrap:` line (a worker killed for want of memory) is taken out first, even from the
middle of a smolserve line, where the console may put it. A `panic:` line is a problem.

This module imports no other harness module: the runner is given a way to open a shell on
a configuration (the command line passes one made from nexos.qemu.QemuSession), so the
parser and the records stand alone and the parser tests need no QEMU.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

PREFIX = "[smolserve] "
INT = r"-?[0-9]+"
LINE_RE = re.compile(r"^\[smolserve\] (.*)$", re.M)
FAULT_RE = re.compile(r"^(usertrap: .*|panic: .*)$", re.M)
# The kernel's line for a killed worker; on the console it may land inside a smolserve line.
USERTRAP_RE = re.compile(r"usertrap: pid [0-9]+ \([^)\n]*\) killed: scause \S+ sepc \S+ "
                         r"stval \S+\n")
EVENT_KINDS = ("admit", "queue", "finish", "recompute")


class ServeParseError(ValueError):
    """smolserve's output does not follow docs/smolserve.md; `line` is the offending one."""

    def __init__(self, message: str, line: str = "") -> None:
        super().__init__(message)
        self.line = line


# --------------------------------------------------------------------------- the records

@dataclass(frozen=True)
class ServeStart:
    """The `workload` and `start` lines: the workload and the kernel's memory at the baseline."""

    workload: str
    requests: int
    longest_max_len: int
    lazy_alloc: int
    cow_alloc: int
    ncpu: int
    total_pages: int
    free_pages: int
    kv_bytes_per_slot: int
    watermark_base_pages: int
    grow_pages: int
    load_ms: int


@dataclass(frozen=True)
class ServeEvent:
    """One admit, queue, finish or recompute line. The keys a kind does not have are None."""

    kind: str
    id: str
    t_ms: int
    running: int
    queued: int
    used_pages: int
    attempt: int | None = None
    free_pages: int | None = None
    est_pages: int | None = None
    watermark_pages: int | None = None
    fork_pages: int | None = None
    reserve_mapped_pages: int | None = None
    reserved_kv_pages: int | None = None
    reason: str | None = None
    generated: int | None = None
    used_slots: int | None = None
    mapped_kv_pages: int | None = None
    decode_ms: int | None = None
    status: int | None = None


@dataclass(frozen=True)
class ServeRequest:
    """One `request` line: what a request reserved and what it used."""

    id: str
    max_len: int
    prompt: int
    generated: int
    reserved_slots: int
    used_slots: int
    internal_waste_slots: int
    reserved_kv_pages: int
    mapped_kv_pages: int
    needed_kv_pages: int
    attempts: int


@dataclass(frozen=True)
class ServeSummary:
    """The SERVE_SUMMARY line."""

    requests: int
    completed: int
    peak_concurrent: int
    queued: int
    recomputed: int
    reserved_kv_pages: int
    mapped_kv_pages: int
    waste_percent: int
    peak_used_pages: int
    tokens_per_s: float


@dataclass(frozen=True)
class ServeMemory:
    """The `memory` line: free pages at the baseline and after every worker was reaped."""

    baseline_free_pages: int
    final_free_pages: int
    leaked_pages: int


@dataclass(frozen=True)
class ServeResult:
    """A parsed smolserve run. An error run has `error` and whatever came before it."""

    start: ServeStart | None
    events: tuple[ServeEvent, ...]
    requests: tuple[ServeRequest, ...]
    summary: ServeSummary | None
    memory: ServeMemory | None
    error: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error,
            "start": None if self.start is None else asdict(self.start),
            "events": [{k: v for k, v in asdict(e).items() if v is not None}
                       for e in self.events],
            "requests": [asdict(r) for r in self.requests],
            "summary": None if self.summary is None else asdict(self.summary),
            "memory": None if self.memory is None else asdict(self.memory),
        }


@dataclass(frozen=True)
class ServeRecord:
    """One smolserve command on one kernel configuration: the parsed result, or the problem
    (a hang, a panic, a killed server, unparseable output) with the console as evidence."""

    config: str
    lazy: int
    cow: int
    cpus: int
    command: str
    seconds: float
    problem: str | None
    result: ServeResult | None
    evidence: str = ""

    @property
    def failed(self) -> bool:
        return self.problem is not None or self.result is None or self.result.error is not None

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {"config": self.config, "lazy": self.lazy, "cow": self.cow,
                                "cpus": self.cpus, "command": self.command,
                                "seconds": round(self.seconds, 2), "problem": self.problem}
        if self.result is None:
            d["evidence"] = self.evidence
        else:
            d.update(self.result.to_json())
        return d


# --------------------------------------------------------------------------- the schema

# The keys of each line kind, in order: name -> type ("int", "str", "pct", "dec").
_START_KEYS = ("lazy_alloc", "cow_alloc", "ncpu", "total_pages", "free_pages",
               "kv_bytes_per_slot", "watermark_base_pages", "grow_pages", "load_ms")
_EVENT_KEYS = {
    "admit": ("id", "attempt", "t_ms", "running", "queued", "free_pages", "est_pages",
              "watermark_pages", "fork_pages", "reserve_mapped_pages", "reserved_kv_pages",
              "used_pages"),
    "queue": ("id", "t_ms", "running", "queued", "free_pages", "est_pages", "watermark_pages",
              "reason", "used_pages"),
    "finish": ("id", "t_ms", "running", "queued", "generated", "used_slots", "mapped_kv_pages",
               "decode_ms", "used_pages"),
    "recompute": ("id", "attempt", "t_ms", "running", "queued", "status", "used_pages"),
}
_RECOMPUTE_TAIL = "(killed before it finished; it runs again)"
_REQUEST_KEYS = ("id", "max_len", "prompt", "generated", "reserved_slots", "used_slots",
                 "internal_waste_slots", "reserved_kv_pages", "mapped_kv_pages",
                 "needed_kv_pages", "attempts")
_SUMMARY_KEYS = ("requests", "completed", "peak_concurrent", "queued", "recomputed",
                 "reserved_kv_pages", "mapped_kv_pages", "waste_percent", "peak_used_pages",
                 "tokens_per_s")
_MEMORY_KEYS = ("baseline_free_pages", "final_free_pages", "leaked_pages")
_STR_KEYS = {"id", "reason", "name"}
_REASONS = ("watermark", "reaping", "processes", "fork_failed", "reserve_failed")


def _value(key: str, text: str, line: str) -> int | float | str:
    """One value of a line, typed by its key."""
    if key in _STR_KEYS:
        if not re.fullmatch(r"[A-Za-z0-9_\-./]+", text):
            raise ServeParseError(f"bad {key} {text!r}", line)
        return text
    if key == "waste_percent":
        if not re.fullmatch(r"[0-9]+%", text):
            raise ServeParseError(f"bad waste_percent {text!r}", line)
        return int(text[:-1])
    if key == "tokens_per_s":
        if not re.fullmatch(r"[0-9]+\.[0-9]", text):
            raise ServeParseError(f"bad tokens_per_s {text!r}", line)
        return float(text)
    if not re.fullmatch(INT, text):
        raise ServeParseError(f"{key}={text!r} is not an integer", line)
    return int(text)


def _fields(rest: str, keys: Sequence[str], line: str) -> dict[str, int | float | str]:
    """`k=v k=v ...` with exactly `keys`, in order."""
    parts = rest.split()
    if len(parts) != len(keys):
        raise ServeParseError(f"expected keys {' '.join(keys)}", line)
    out: dict[str, int | float | str] = {}
    for key, part in zip(keys, parts):
        k, eq, v = part.partition("=")
        if k != key or not eq:
            raise ServeParseError(f"expected {key}=..., got {part!r}", line)
        out[key] = _value(key, v, line)
    return out


def _event(kind: str, rest: str, line: str) -> ServeEvent:
    if kind == "recompute":
        if not rest.endswith(" " + _RECOMPUTE_TAIL):
            raise ServeParseError("a recompute line ends with " + _RECOMPUTE_TAIL, line)
        rest = rest[: -len(_RECOMPUTE_TAIL) - 1]
    f = _fields(rest, _EVENT_KEYS[kind], line)
    if kind == "queue" and f["reason"] not in _REASONS:
        raise ServeParseError(f"unknown queue reason {f['reason']!r}", line)
    return ServeEvent(kind=kind, **f)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the parser

def find_faults(text: str) -> list[str]:
    """The `usertrap:` and `panic:` lines of a console transcript."""
    return FAULT_RE.findall(text)


def parse_serve(text: str) -> ServeResult:
    """Parse the console output of one smolserve command. ServeParseError when a
    `[smolserve] ` line breaks the schema or the run neither finished nor failed."""
    workload: dict[str, int | float | str] | None = None
    start: ServeStart | None = None
    events: list[ServeEvent] = []
    requests: list[ServeRequest] = []
    summary: ServeSummary | None = None
    memory: ServeMemory | None = None
    error: str | None = None
    for m in LINE_RE.finditer(USERTRAP_RE.sub("", text)):
        line = m.group(0).rstrip()
        body = m.group(1).rstrip()
        kind, _, rest = body.partition(" ")
        if error is not None:
            raise ServeParseError("a line after the error", line)
        if body == "loading LLM assets...":
            continue
        if kind == "error:":
            error = rest
        elif kind == "workload":
            workload = _fields(rest, ("name", "requests", "longest_max_len"), line)
        elif kind == "start":
            if workload is None:
                raise ServeParseError("start before workload", line)
            start = ServeStart(workload=str(workload["name"]),  # type: ignore[arg-type]
                               requests=int(workload["requests"]),
                               longest_max_len=int(workload["longest_max_len"]),
                               **_fields(rest, _START_KEYS, line))
        elif kind in EVENT_KINDS:
            if start is None or requests:
                raise ServeParseError("an event outside the serving phase", line)
            events.append(_event(kind, rest, line))
        elif kind == "request":
            requests.append(ServeRequest(**_fields(rest, _REQUEST_KEYS, line)))  # type: ignore[arg-type]
        elif kind == "SERVE_SUMMARY":
            summary = ServeSummary(**_fields(rest, _SUMMARY_KEYS, line))  # type: ignore[arg-type]
        elif kind == "memory":
            if summary is None:
                raise ServeParseError("memory before SERVE_SUMMARY", line)
            memory = ServeMemory(**_fields(rest, _MEMORY_KEYS, line))  # type: ignore[arg-type]
        else:
            raise ServeParseError(f"unknown line kind {kind!r}", line)
    if error is None and memory is None:
        raise ServeParseError("the run ended without SERVE_SUMMARY and memory lines (or an error)")
    return ServeResult(start, tuple(events), tuple(requests), summary, memory, error)


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
    """What the runner needs of a booted kernel (nexos.qemu.QemuSession is one)."""

    def run(self, cmd: str, timeout: float = ...) -> Output: ...


OpenShell = Callable[[int, int, int], AbstractContextManager[Shell]]
ShellErrors = tuple[type[BaseException], ...]


# ---------------------------------------------------------------- the workload options

DEFAULT_REQUESTS, DEFAULT_MAX_LEN = 32, 2048  # the README's workload: no workload given
BUILTIN_WORKLOADS = ("seed32",)
GUEST_WORKLOAD = "/workload"  # where a workload file from the host is written in the guest
# user/smolserve.c's limits (docs/smolserve.md "Workloads")
MAX_REQUESTS, MAX_PROMPT, MAX_ID, MAX_FILE = 64, 64, 15, 65536
MAX_LEN_LIMIT, MAX_TOKEN_ID = 1 << 24, 10**9  # LLM_MAX_DIM; the parser's bound on an id
_ID_RE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID}}}")
_NUM_RE = re.compile(r"[0-9]{1,15}")
_PROMPT_RE = re.compile(r"[0-9]{1,10}(,[0-9]{1,10})*")


@dataclass(frozen=True)
class WorkloadRequest:
    """One line of a workload file: `id max_len prompt gen=N|eos` (gen None: eos)."""

    id: str
    max_len: int
    prompt: tuple[int, ...]
    gen: int | None

    def line(self) -> str:
        """The line as smolserve reads it, fields one space apart."""
        end = "eos" if self.gen is None else f"gen={self.gen}"
        return f"{self.id} {self.max_len} {','.join(map(str, self.prompt))} {end}"


@dataclass(frozen=True)
class ServeWorkload:
    """What `nexos serve`'s workload options resolve to: smolserve's flags; the workload
    file on the host that must first be written into the guest as GUEST_WORKLOAD
    (read_workload, workload_commands), None for a built-in or generated workload; and,
    when no workload was given, the line that says which one runs."""

    args: list[str]
    file: Path | None = None
    note: str | None = None


def _request(fields: list[str], where: str) -> WorkloadRequest:
    """One request line's fields -> a WorkloadRequest; ValueError `<where>: <why>` with
    smolserve's own reasons (user/smolserve.c parse_line)."""
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
    ids = prompt.split(",")
    if (not _PROMPT_RE.fullmatch(prompt) or len(ids) > MAX_PROMPT
            or max(int(t) for t in ids) > MAX_TOKEN_ID):
        raise ValueError(f"{where}: the prompt must be 1-{MAX_PROMPT} comma-separated "
                         "token ids")
    gen: int | None = None
    if end != "eos":
        n = end.removeprefix("gen=")
        if n == end:
            raise ValueError(f"{where}: the end must be gen=N or eos")
        if not _NUM_RE.fullmatch(n) or int(n) > MAX_LEN_LIMIT:
            raise ValueError(f"{where}: gen=N needs a number N >= 0")
        gen = int(n)
    if len(ids) + (gen or 0) > int(max_len):
        raise ValueError(f"{where}: prompt ({len(ids)}) + generated ({gen or 0}) exceeds "
                         f"max_len {max_len}")
    return WorkloadRequest(rid, int(max_len), tuple(int(t) for t in ids), gen)


def parse_workload(text: str, name: str) -> list[WorkloadRequest]:
    """The requests of a workload file's text (docs/smolserve.md "Workloads": blank lines
    and lines starting with `#` skipped, fields apart by spaces or tabs). ValueError
    `<name>:<line>: <why>` at the first bad line, `<name>: no requests` for none."""
    out: list[WorkloadRequest] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.split("\n"), 1):
        fields = raw.rstrip("\r").replace("\t", " ").split(" ")
        fields = [f for f in fields if f]
        if not fields or fields[0].startswith("#"):
            continue
        where = f"{name}:{n}"
        if len(out) == MAX_REQUESTS:
            raise ValueError(f"{where}: more than {MAX_REQUESTS} requests")
        req = _request(fields, where)
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
    first truncates the file). The words are ids, numbers and `gen=`: no quoting needed."""
    return [f"echo {r.line()} {'>' if i == 0 else '>>'} {dest}"
            for i, r in enumerate(requests)]


def serve_workload(workload: str | None, requests: int | None, max_len: int | None,
                   seed: int | None = None, long_len: int | None = None) -> ServeWorkload:
    """Resolve `nexos serve`'s workload options (None: not given): a built-in workload
    (seed32), a workload file on the host (not read here: see ServeWorkload.file), or a
    generated one (both --requests and --max-len; --seed and --long-len go only with it).
    None of them: the README's generated workload, DEFAULT_REQUESTS x DEFAULT_MAX_LEN, with
    a note saying so. ValueError (a user mistake) for a mix or a half of them."""
    generated = requests is not None or max_len is not None
    tuning = [f for f, v in (("--seed", seed), ("--long-len", long_len)) if v is not None]
    if workload is not None:
        if generated:
            raise ValueError("give --workload or --requests/--max-len, not both")
        if tuning:
            verb = "go" if len(tuning) > 1 else "goes"
            raise ValueError(f"{' and '.join(tuning)} {verb} with a generated workload "
                             "(--requests/--max-len), not with --workload")
        if workload in BUILTIN_WORKLOADS:
            return ServeWorkload(["--workload", workload])
        return ServeWorkload(["--workload", GUEST_WORKLOAD], Path(workload))
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
    return ServeWorkload(args, None, note)


def serve_command(args: Sequence[str]) -> str:
    return " ".join(["smolserve", *(shlex.quote(a) for a in args)])


def run_serve(open_shell: OpenShell, lazy: int, cow: int, cpus: int, args: Sequence[str],
              timeout: float, errors: ShellErrors = (OSError,)) -> ServeRecord:
    """Boot (lazy, cow, cpus) with open_shell, run smolserve once, parse. The exceptions in
    `errors` (the session's own) become the record's problem."""
    cmd = serve_command(args)
    name = f"lazy{lazy}-cow{cow}"
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
    faults = find_faults(text)
    try:
        result = parse_serve(text)
    except ServeParseError as e:
        return ServeRecord(name, lazy, cow, cpus, cmd, seconds, f"{e} ({e.line!r})", None,
                           text[-2000:])
    # usertrap lines are workers killed for want of memory (the server runs them again;
    # a killed server would leave no SERVE_SUMMARY): only a panic is a problem here
    panics = [f for f in faults if f.startswith("panic")]
    problem = f"kernel {panics[0]}" if panics else None
    return ServeRecord(name, lazy, cow, cpus, cmd, seconds, problem, result,
                       text[-2000:] if problem else "")


def run_serves(open_shell: OpenShell, configs: Sequence[tuple[int, int]], cpus: int,
               args: Sequence[str], timeout: float,
               errors: ShellErrors = (OSError,)) -> list[ServeRecord]:
    """run_serve on each (lazy, cow) in turn (one QEMU at a time)."""
    return [run_serve(open_shell, lazy, cow, cpus, args, timeout, errors)
            for lazy, cow in configs]
