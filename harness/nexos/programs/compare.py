"""Run smolprobe on several configurations (each in its own QEMU), and turn each run into a
ProbeRecord (the rows of `nexos compare`, see docs/harness.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from nexos.machine.config import BuildConfig, matrix
from nexos.machine.qemu import QemuError, QemuSession
from nexos.parse import ParseError, SmolprobeResult, find_panic, find_usertraps, parse_smolprobe
from nexos.records import BranchLine, ParallelRecord, ProbeNumbers, ProbeRecord, ProbeRequest

Probe = tuple[BuildConfig, ProbeRequest]


class ProbeFailed(RuntimeError):
    """A run that a command needs gave no usable result. `evidence` shows why."""

    def __init__(self, message: str, evidence: str = "") -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass
class ProbeRun:
    """One smolprobe run on one configuration. `problem` is set when the harness could not
    get a parsed result (panic, hang, QEMU failure, garbage); `evidence` shows why."""

    config: BuildConfig
    command: str
    result: SmolprobeResult | None = None
    seconds: float = 0.0
    boot_seconds: float | None = None
    problem: str | None = None
    evidence: str = ""
    output: str = ""
    faults: list[str] = field(default_factory=list)

    def usable(self, line: str, printed: Callable[[SmolprobeResult], object]
               ) -> SmolprobeResult:
        """The parsed result of a run without problem or error for which printed(result)
        is true (it printed `line`); otherwise ProbeFailed naming the run and the reason."""
        res = self.result
        if res is None or res.error or self.problem or not printed(res):
            why = self.problem or (res.error if res and res.error else f"no {line} line")
            raise ProbeFailed(f"{self.config.name} `{self.command}`: {why}",
                              self.evidence or self.output[-2000:])
        return res


def run_probe(repo: Path, config: BuildConfig, req: ProbeRequest,
              timeout: float = 900.0) -> ProbeRun:
    """Boot `config` with the LLM image, run smolprobe once, parse. Never raises QemuError."""
    run = ProbeRun(config, req.command())
    try:
        with QemuSession.for_config(config, repo, llm=True, lifetime=timeout + 300) as s:
            run.boot_seconds = s.boot_seconds
            t0 = time.monotonic()
            res = s.run(run.command, timeout=timeout)
            run.seconds = time.monotonic() - t0
            run.output = res.output
    except QemuError as e:
        run.problem, run.evidence = str(e), e.evidence
        return run
    run.faults = [f for f in (find_panic(run.output),) if f] + list(find_usertraps(run.output))
    try:
        run.result = parse_smolprobe(run.output)
    except ParseError as e:
        run.problem, run.evidence = str(e.args[0]), e.text[-2000:]
    if run.faults and run.problem is None:
        run.problem, run.evidence = "smolprobe was killed: " + run.faults[0], run.output[-2000:]
    return run


def run_probes(repo: Path, probes: list[Probe], timeout: float = 900.0,
               jobs: int = 2) -> list[ProbeRun]:
    """run_probe for every (configuration, request), `jobs` QEMUs at a time; the runs in the
    order of `probes`."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda p: run_probe(repo, p[0], p[1], timeout), probes))


def compare_probes(req: ProbeRequest, samples: int | None, all_four: bool,
                   memsize: int) -> list[Probe]:
    """What `nexos compare` runs: `req` on the eager and the lazy sbrk kernel (both
    COW_ALLOC=0), or on all four configurations with `all_four`; with `samples` also `req`
    with --samples on the lazy kernel with COW off and on (all four with `all_four`)."""
    eager, lazy, cow = (BuildConfig(0, 0, memsize), BuildConfig(1, 0, memsize),
                        BuildConfig(1, 1, memsize))
    single = replace(req, samples=None)
    probes = [(c, single) for c in (matrix(memsize) if all_four else [eager, lazy])]
    if samples is not None:
        parallel = replace(req, samples=samples)
        probes += [(c, parallel) for c in (matrix(memsize) if all_four else [lazy, cow])]
    return probes


def parallel_record(r: SmolprobeResult, asked: int) -> ParallelRecord:
    """The --samples part of a parsed run that asked for `asked` branches."""
    p, f = r.parallel, r.fork
    return ParallelRecord(
        branches=asked,
        forked=f.branches if f else len(r.branches),
        shared_pages_at_fork=f.shared_pages_at_fork if f else None,
        prefix_kv_pages=f.prefix_kv_pages if f else None,
        eager_copy_pages=p.eager_copy_pages if p else None,
        actual_copied_pages=p.actual_copied_pages if p else None,
        saved_pages=p.saved_pages if p else None,
        saved_percent=p.saved_percent if p else None,
        cow_copies=sum(b.cow_copies or 0 for b in r.branches),
        cow_reuses=sum(b.cow_reuses or 0 for b in r.branches),
        new_kv_pages=sum(b.new_kv_pages or 0 for b in r.branches),
        verdict=r.parallel_verdict,
        fork_failures=tuple(x.line for x in r.fork_failed),
        killed=tuple(x.line for x in r.killed),
        unstarted=tuple(x.line for x in r.unstarted),
        branch_lines=tuple(BranchLine(b.index, b.tokens, b.cow_copies, b.cow_reuses,
                                      b.new_kv_pages, dict(b.fields)) for b in r.branches),
    )


def probe_numbers(r: SmolprobeResult, req: ProbeRequest) -> ProbeNumbers:
    """The numbers of a parsed run (the --samples part when `req` asked for branches)."""
    s, reserve, decode = r.summary, r.reserve, r.decode
    return ProbeNumbers(
        error=r.error, verdict=r.verdict,
        max_kv_pages=s.max_kv_pages if s else None,
        actual_mapped_pages=s.actual_mapped_pages if s else None,
        saved_pages=s.saved_pages if s else None,
        saved_percent=s.saved_percent if s else None,
        active_pages_est=r.kv_capacity.active_pages_est if r.kv_capacity else None,
        reserve_virtual_pages=reserve.virtual_pages if reserve else None,
        reserve_mapped_pages=reserve.mapped_pages if reserve else None,
        reserve_used_pages=reserve.used_pages if reserve else None,
        decode_mapped_pages=decode.mapped_pages if decode else None,
        decode_used_pages=decode.used_pages if decode else None,
        parallel=(parallel_record(r, req.samples)
                  if req.samples is not None and r.error is None else None),
        trace=tuple((t.step, t.pos, t.kv_mapped_pages) for t in r.trace),
    )


def probe_record(run: ProbeRun, req: ProbeRequest) -> ProbeRecord:
    """The record of one run of `req` (for --json and the tables)."""
    request = run.result.request if run.result is not None else None
    exp_max, exp_active = req.expected(
        prompt_len=request.prompt_tokens if req.text is not None and request else None)
    return ProbeRecord(
        config=run.config.name, lazy=run.config.lazy, cow=run.config.cow,
        command=run.command, samples=req.samples, seconds=run.seconds,
        boot_seconds=run.boot_seconds, expected_max_kv_pages=exp_max,
        expected_active_pages_est=exp_active, problem=run.problem,
        numbers=None if run.result is None else probe_numbers(run.result, req),
        evidence=run.evidence if run.result is None else "",
    )
