"""The records that several harness modules share: what to ask smolprobe for
(`ProbeRequest`), what one run showed (`ProbeRecord`, the rows of `nexos compare` and its
`--json`), one grading check's outcome (`CheckResult`), smolserve's parsed lines
(`ServeResult`, what nexos.parse.smolserve returns) and runs (`ServeRecord`, the rows of
`nexos serve` and its `--json`), and the system-call fuzzer's lines (`FuzzResult`) and runs
(`FuzzRecord`, the rows of `nexos fuzz` and its `--json`).

Plain data only: this module imports no other harness module but the page formulas and the
C programs' defaults (nexos.machine.limits).
The JSON keys are listed in docs/harness.md.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field

from nexos.machine.limits import PAGE_SIZE, SMOLPROBE_TEXT_GEN
from nexos.programs.kvcache import KvShape, active_pages_est, max_kv_pages

DEFAULT_PROMPT = (1, 2, 3)
DEFAULT_GEN = 10
# Tokens each branch of --samples generates where only its copies are counted (the grade's
# parallel check, plot's branches figure): a branch makes all its copies at its first
# writes (the half-filled last KV page of each region, the state it writes), so two tokens
# count what forty would (docs/harness.md, "nexos plot").
BRANCH_GEN_LEN = 2
TEXT_GEN = SMOLPROBE_TEXT_GEN  # smolprobe's --gen-len for --prompt/--chat when none is given
TEXT_FLAGS = ("--prompt", "--chat")

JsonScalar = int | float | str | None
Json = JsonScalar | list["Json"] | dict[str, "Json"]


@dataclass(frozen=True)
class ProbeRequest:
    """What to ask smolprobe for. `text` is (`--prompt` or `--chat`, the text), which takes
    the place of `prompt_tokens`; `extra` are further flags passed through verbatim."""

    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT
    gen_len: int = DEFAULT_GEN
    seq_len: int | None = None
    samples: int | None = None
    trace: bool = False
    extra: tuple[str, ...] = ()
    text: tuple[str, str] | None = None

    def args(self) -> list[str]:
        if self.text is not None:
            a = [*self.text, "--gen-len", str(self.gen_len)]
        else:
            a = ["--prompt-tokens", ",".join(str(t) for t in self.prompt_tokens),
                 "--gen-len", str(self.gen_len)]
        if self.seq_len is not None:
            a += ["--seq-len", str(self.seq_len)]
        if self.samples is not None:
            a += ["--samples", str(self.samples)]
        if self.trace:
            a.append("--trace")
        return a + list(self.extra)

    @classmethod
    def from_args(cls, args: tuple[str, ...] | list[str]) -> ProbeRequest:
        """Parse smolprobe's own flags; anything unknown is kept in `extra` verbatim.
        ValueError on a malformed value of a known flag."""
        prompt, gen_len, seq_len, samples = DEFAULT_PROMPT, None, None, None
        trace = False
        text: tuple[str, str] | None = None
        extra: list[str] = []
        it = iter(args)
        for a in it:
            flag, eq, val = a.partition("=")
            name = flag.replace("_", "-")
            if name in TEXT_FLAGS:
                text = (name, val if eq else next(it, ""))
            elif name in ("--prompt-tokens", "--gen-len", "--seq-len", "--samples"):
                if not eq:
                    val = next(it, "")
                if name == "--prompt-tokens":
                    prompt = tuple(int(t) for t in val.split(",") if t)
                elif name == "--gen-len":
                    gen_len = int(val)
                elif name == "--seq-len":
                    seq_len = int(val)
                else:
                    samples = int(val)
            elif a == "--trace":
                trace = True
            else:
                extra.append(a)
        if gen_len is None:
            gen_len = TEXT_GEN if text is not None else DEFAULT_GEN
        return cls(prompt, gen_len, seq_len, samples, trace, tuple(extra), text)

    def command(self) -> str:
        return " ".join(["smolprobe", *(shlex.quote(x) for x in self.args())])

    def expected(self, shape: KvShape | None = None, prompt_len: int | None = None
                 ) -> tuple[int, int]:
        """(max_kv_pages, active_pages_est) that the formulas of docs/kvcache.md give for
        this request; `prompt_len` is the prompt's token count when smolprobe encoded a text
        (its `request` line says it)."""
        shape = shape or KvShape()
        if self.seq_len is not None:
            shape = shape.with_seq_len(self.seq_len)
        rows = (len(self.prompt_tokens) if prompt_len is None else prompt_len) + self.gen_len
        return max_kv_pages(shape), active_pages_est(shape, rows)


@dataclass(frozen=True)
class BranchLine:
    """One `branch i ...` line of a --samples run; `other` holds the keys beyond the named
    ones, as smolprobe printed them (token lists as tuples)."""

    index: int
    tokens: tuple[int, ...]
    cow_copies: int | None
    cow_reuses: int | None
    new_kv_pages: int | None
    other: dict[str, int | float | str | tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Json]:
        named: dict[str, Json] = {"index": self.index, "tokens": list(self.tokens),
                                  "cow_copies": self.cow_copies,
                                  "cow_reuses": self.cow_reuses,
                                  "new_kv_pages": self.new_kv_pages}
        return {**named, **{k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in self.other.items()}}


@dataclass(frozen=True)
class ParallelRecord:
    """The --samples part of a run: the fork, the branches, the summary and its verdict.
    `branches` is how many were asked for, `forked` how many forks succeeded; the sums are
    over the branches that reported."""

    branches: int
    forked: int
    shared_pages_at_fork: int | None
    prefix_kv_pages: int | None
    eager_copy_pages: int | None
    actual_copied_pages: int | None
    saved_pages: int | None
    saved_percent: int | None
    cow_copies: int
    cow_reuses: int
    new_kv_pages: int
    verdict: str | None               # COW_STYLE | EAGER_FORK_STYLE
    fork_failures: tuple[str, ...]    # smolprobe's own `fork of branch k failed` lines
    killed: tuple[str, ...]           # smolprobe's own `branch i killed ...` lines
    unstarted: tuple[str, ...]        # smolprobe's own `branch i could not be started` lines
    branch_lines: tuple[BranchLine, ...]

    def to_json(self) -> dict[str, Json]:
        return {
            "branches": self.branches, "forked": self.forked,
            "shared_pages_at_fork": self.shared_pages_at_fork,
            "prefix_kv_pages": self.prefix_kv_pages,
            "eager_copy_pages": self.eager_copy_pages,
            "actual_copied_pages": self.actual_copied_pages,
            "saved_pages": self.saved_pages, "saved_percent": self.saved_percent,
            "cow_copies": self.cow_copies, "cow_reuses": self.cow_reuses,
            "new_kv_pages": self.new_kv_pages, "verdict": self.verdict,
            "fork_failures": list(self.fork_failures), "killed": list(self.killed),
            "unstarted": list(self.unstarted),
            "branch_lines": [b.to_json() for b in self.branch_lines],
        }


@dataclass(frozen=True)
class ProbeNumbers:
    """What a parsed smolprobe run printed. A part smolprobe did not print is None (a
    --samples run prints no SUMMARY, decode phase or sbrk verdict)."""

    error: str | None
    verdict: str | None               # LAZY_STYLE | EAGER_STYLE | MIXED
    max_kv_pages: int | None = None
    actual_mapped_pages: int | None = None
    saved_pages: int | None = None
    saved_percent: int | None = None
    active_pages_est: int | None = None
    reserve_virtual_pages: int | None = None
    reserve_mapped_pages: int | None = None
    reserve_used_pages: int | None = None
    decode_mapped_pages: int | None = None
    decode_used_pages: int | None = None
    parallel: ParallelRecord | None = None
    trace: tuple[tuple[int, int, int], ...] = ()  # (step, pos, kv_mapped_pages)

    def to_json(self) -> dict[str, Json]:
        """`error` and `verdict` always; every other part only when smolprobe printed it."""
        d: dict[str, Json] = {"error": self.error}
        for key in ("max_kv_pages", "actual_mapped_pages", "saved_pages", "saved_percent",
                    "active_pages_est", "reserve_virtual_pages", "reserve_mapped_pages",
                    "reserve_used_pages", "decode_mapped_pages", "decode_used_pages"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        d["verdict"] = self.verdict
        if self.parallel is not None:
            d["parallel"] = self.parallel.to_json()
        if self.trace:
            d["trace"] = [list(t) for t in self.trace]
        return d


@dataclass(frozen=True)
class ProbeRecord:
    """One smolprobe run on one configuration. `numbers` is None when the harness got no
    parsed output (then `evidence` shows why); `problem` says what went wrong, if anything
    (a panic, a hang, garbage, a killed smolprobe)."""

    config: str
    lazy: int
    cow: int
    command: str
    samples: int | None               # the request's --samples (None: a single request)
    seconds: float
    boot_seconds: float | None
    expected_max_kv_pages: int
    expected_active_pages_est: int
    problem: str | None
    numbers: ProbeNumbers | None
    evidence: str = ""

    @property
    def failed(self) -> bool:
        """No usable result: the harness saw a problem or smolprobe printed an error."""
        return self.problem is not None or self.numbers is None or self.numbers.error is not None

    def to_json(self) -> dict[str, Json]:
        d: dict[str, Json] = {
            "config": self.config, "lazy": self.lazy, "cow": self.cow,
            "command": self.command, "samples": self.samples,
            "seconds": round(self.seconds, 2),
            "boot_seconds": None if self.boot_seconds is None else round(self.boot_seconds, 2),
            "expected_max_kv_pages": self.expected_max_kv_pages,
            "expected_active_pages_est": self.expected_active_pages_est,
            "problem": self.problem,
        }
        if self.numbers is None:
            d["evidence"] = self.evidence
        else:
            d.update(self.numbers.to_json())
        return d


@dataclass(frozen=True)
class CheckResult:
    """One grading check on one configuration."""

    config: str
    name: str
    passed: bool
    points: int
    max_points: int
    seconds: float
    message: str
    evidence: str = ""


# --------------------------------------------------------------------------- smolserve

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
    pagecache_pages: int | None = None


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
    prefix_tokens: int
    shared_kv_pages: int
    copied_kv_pages: int
    answer_fnv: int


@dataclass(frozen=True)
class ServePrefix:
    """One `prefix` line: a shared prefix the server prefilled once."""

    id: str
    tokens: int
    requests: int
    max_len: int
    reserved_kv_pages: int
    mapped_kv_pages: int
    prefill_ms: int


@dataclass(frozen=True)
class PrefixSummary:
    """The PREFIX_SUMMARY line: what sharing prefixes saved against prefilling each request
    alone (docs/smolserve.md, "Shared prefixes")."""

    prefixes: int
    sharing_requests: int
    prefill_tokens: int
    prefill_tokens_saved: int
    prefix_kv_pages: int
    shared_kv_pages: int
    copied_kv_pages: int
    kv_pages_saved: int


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

    @property
    def peak_used_mib(self) -> float:
        return self.peak_used_pages * PAGE_SIZE / 2**20


@dataclass(frozen=True)
class ServePressure:
    """A `pressure` line (`--overcommit 1`): what memory pressure cost one request."""

    id: str
    attempts: int
    recomputed_tokens: int
    paged_out: int
    paged_in: int


@dataclass(frozen=True)
class PressureSummary:
    """The PRESSURE_SUMMARY line (`--overcommit 1`): recompute and swap over the whole run
    (docs/smolserve.md, "Overcommit")."""

    completed: int
    recomputed: int
    recomputed_tokens: int
    swap_slots: int
    swap_outs: int
    swap_ins: int
    dropped_file_pages: int
    wall_ms: int


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
    prefixes: tuple[ServePrefix, ...] = ()
    prefix_summary: PrefixSummary | None = None
    pressure: tuple[ServePressure, ...] = ()
    pressure_summary: PressureSummary | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error,
            "start": None if self.start is None else asdict(self.start),
            "prefixes": [asdict(p) for p in self.prefixes],
            "events": [{k: v for k, v in asdict(e).items() if v is not None}
                       for e in self.events],
            "requests": [asdict(r) for r in self.requests],
            "summary": None if self.summary is None else asdict(self.summary),
            "prefix_summary": (None if self.prefix_summary is None
                               else asdict(self.prefix_summary)),
            "pressure": [asdict(p) for p in self.pressure],
            "pressure_summary": (None if self.pressure_summary is None
                                 else asdict(self.pressure_summary)),
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


@dataclass(frozen=True)
class SwapComparison:
    """`nexos serve --swap`: one workload on one configuration, run under overcommit on a
    fresh boot without swap and on one with a `swapsize` MiB swap disk (docs/smolserve.md,
    "Overcommit: recompute against swap")."""

    workload: str
    swapsize: int
    without: ServeRecord
    with_swap: ServeRecord

    @property
    def same_answers(self) -> bool:
        """Whether both ways gave every request the same greedy answer."""
        a, b = self.without.result, self.with_swap.result
        return (a is not None and b is not None and bool(a.requests)
                and [(r.id, r.answer_fnv) for r in a.requests]
                == [(r.id, r.answer_fnv) for r in b.requests])

    @property
    def problem(self) -> str | None:
        """Why the comparison is not a clean one, or None: a run that failed, one with no
        PRESSURE_SUMMARY, a request not completed, or answers that differ."""
        for way, rec in (("without swap", self.without), ("with swap", self.with_swap)):
            res = rec.result
            if rec.failed or res is None:
                why = rec.problem or (res.error if res is not None else None) or "no result"
                return f"{way}: {why}"
            ps, s = res.pressure_summary, res.summary
            if ps is None or s is None:
                return f"{way}: no PRESSURE_SUMMARY (smolserve ran without --overcommit 1?)"
            if ps.completed != s.requests:
                return f"{way}: {ps.completed} of {s.requests} requests completed"
        if not self.same_answers:
            return "the answers differ with and without swap"
        return None

    def to_json(self) -> dict[str, object]:
        return {"workload": self.workload, "swap_mib": self.swapsize,
                "same_answers": self.same_answers, "problem": self.problem,
                "without_swap": self.without.to_json(), "with_swap": self.with_swap.to_json()}



# --------------------------------------------------------------------------- fuzz

@dataclass(frozen=True)
class FuzzSummary:
    """fuzz's `fuzz: done` line (docs/fuzz.md, "Output"): what every process of the run
    reported, and the memory that did not come back."""

    calls: int
    forks: int
    kills: int
    failures: int          # processes that printed a FAIL line, or workers that died
    faults_killed: int     # ... because the kernel killed a process
    leaked_pages: int      # free pages net of swap, missing after the run
    leaked_cache: int      # page-cache pages more than before
    swap_slots_before: int
    swap_slots_after: int
    swap_outs: int         # pages written to swap during the run (the whole system)
    swap_ins: int          # ... and read back
    seconds: int           # the guest's own clock, start to verdict


@dataclass(frozen=True)
class FuzzResult:
    """One fuzz run's lines: its `fuzz: start` line's fields, its summary (None when the
    run was cut short), its FAIL lines, the leak check, and the verdict."""

    seed: int
    procs: int
    ops: int               # operations per worker (0: --seconds)
    seconds: int           # --seconds (0: --ops)
    lazy: int
    cow: int
    harts: int
    total_pages: int
    swap_slots: int
    summary: FuzzSummary | None
    fails: tuple[str, ...]          # `fuzz: FAIL ...` lines, each ending with its repro
    leakcheck: bool | None          # `test leakcheck: OK` (None: no such line)
    passed: bool                    # the last line is ALL TESTS PASSED

    @property
    def repro(self) -> str | None:
        """The guest command of the first FAIL line's `repro:`, or None."""
        for line in self.fails:
            _, sep, cmd = line.partition("; repro: ")
            if sep:
                return cmd.strip()
        return None


@dataclass(frozen=True)
class FuzzRecord:
    """`nexos fuzz` in one configuration: the run's parsed lines, or what stopped it (a
    kernel panic, a hang, output that is not fuzz's), with the console's tail as evidence
    and one line that runs the same again (`repro`)."""

    config: str
    lazy: int
    cow: int
    cpus: int
    swap: int              # MiB of swap disk (0: none)
    command: str           # what ran in the guest
    seconds: float         # wall time of the boot and the run
    result: FuzzResult | None
    panic: str | None      # the kernel's `panic:` line
    hang: bool             # no prompt in time
    usertraps: int         # `usertrap:` lines: processes the kernel killed
    problem: str | None    # why this run is not clean; None: clean
    repro: str             # a host command that runs it again
    evidence: str = ""     # the console's tail when there is a problem

    @property
    def failed(self) -> bool:
        return self.problem is not None

    def to_json(self) -> dict[str, object]:
        res, s = self.result, self.result.summary if self.result else None
        d: dict[str, object] = {
            "config": self.config, "lazy": self.lazy, "cow": self.cow, "cpus": self.cpus,
            "swap_mib": self.swap, "command": self.command, "seconds": round(self.seconds, 1),
            "seed": res.seed if res else None, "procs": res.procs if res else None,
            "panic": self.panic, "hang": self.hang, "usertraps": self.usertraps,
            "fails": list(res.fails) if res else [], "problem": self.problem,
            "repro": self.repro, "summary": asdict(s) if s else None,
        }
        if self.problem is not None:
            d["evidence"] = self.evidence
        return d
