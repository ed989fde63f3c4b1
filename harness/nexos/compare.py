"""Run smolprobe on several configurations (each in its own QEMU) and collect the results."""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nexos.config import BuildConfig, matrix
from nexos.kvcache import KvShape, active_pages_est, max_kv_pages
from nexos.parse import ParseError, SmolprobeResult, find_panic, find_usertraps, parse_smolprobe
from nexos.qemu import QemuError, QemuSession

DEFAULT_PROMPT = (1, 2, 3)
DEFAULT_GEN = 10


@dataclass(frozen=True)
class ProbeRequest:
    """What to ask smolprobe for. `extra` are further flags passed through verbatim."""

    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT
    gen_len: int = DEFAULT_GEN
    seq_len: int | None = None
    samples: int | None = None
    trace: bool = False
    extra: tuple[str, ...] = ()

    def args(self) -> list[str]:
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
        kw: dict[str, object] = {}
        extra: list[str] = []
        it = iter(args)
        for a in it:
            flag, eq, val = a.partition("=")
            name = flag.replace("_", "-")
            if name in ("--prompt-tokens", "--gen-len", "--seq-len", "--samples"):
                if not eq:
                    val = next(it, "")
                if name == "--prompt-tokens":
                    kw["prompt_tokens"] = tuple(int(t) for t in val.split(",") if t)
                else:
                    kw[name[2:].replace("-", "_")] = int(val)
            elif a == "--trace":
                kw["trace"] = True
            else:
                extra.append(a)
        return cls(extra=tuple(extra), **kw)  # type: ignore[arg-type]

    def command(self) -> str:
        return " ".join(["smolprobe", *(shlex.quote(x) for x in self.args())])

    def expected(self, shape: KvShape | None = None) -> tuple[int, int]:
        """(max_kv_pages, active_pages_est) the DESIGN.md §5 formulas give for this request."""
        shape = shape or KvShape()
        if self.seq_len is not None:
            shape = shape.with_seq_len(self.seq_len)
        rows = len(self.prompt_tokens) + self.gen_len
        return max_kv_pages(shape), active_pages_est(shape, rows)


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


def run_probe(repo: Path, config: BuildConfig, req: ProbeRequest, timeout: float = 900.0,
              transcript: Path | None = None, llm: bool = True) -> ProbeRun:
    """Boot `config` with the LLM image, run smolprobe once, parse. Never raises QemuError."""
    run = ProbeRun(config, req.command())
    try:
        with QemuSession.for_config(config, repo, llm=llm, transcript=transcript,
                                    lifetime=timeout + 300) as s:
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


def compare_configs(all_four: bool, samples: int | None, memsize: int) -> list[BuildConfig]:
    """What `nexos compare` boots: eager and lazy sbrk (both COW_ALLOC=0); with --samples also
    the lazy kernel with COW_ALLOC=1, so that the parallel table has COW off and on;
    with --matrix all four configurations."""
    if all_four:
        return matrix(memsize)
    configs = [BuildConfig(0, 0, memsize), BuildConfig(1, 0, memsize)]
    if samples is not None:
        configs.append(BuildConfig(1, 1, memsize))
    return configs


def run_many(repo: Path, configs: list[BuildConfig], req: ProbeRequest,
             timeout: float = 900.0, jobs: int = 2) -> list[ProbeRun]:
    """run_probe on every configuration, `jobs` QEMUs at a time; results in input order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda c: run_probe(repo, c, req, timeout), configs))


def parallel_record(r: SmolprobeResult) -> dict[str, object]:
    """The --samples part of a result: fork phase, branches, summary, verdict, failed forks."""
    p, f = r.parallel, r.fork
    return {
        "branches": f.branches if f else (p.branches if p else len(r.branches)),  # asked
        "forked": len(r.branches),
        "shared_pages_at_fork": f.shared_pages_at_fork if f else None,
        "prefix_kv_pages": f.prefix_kv_pages if f else None,
        "eager_copy_pages": p.eager_copy_pages if p else None,
        "actual_copied_pages": p.actual_copied_pages if p else None,
        "saved_pages": p.saved_pages if p else None,
        "saved_percent": p.saved_percent if p else None,
        "cow_copies": sum(b.cow_copies or 0 for b in r.branches),
        "cow_reuses": sum(b.cow_reuses or 0 for b in r.branches),
        "new_kv_pages": sum(b.new_kv_pages or 0 for b in r.branches),
        "verdict": r.parallel_verdict,
        "fork_failures": list(r.fork_failures),
        "branch_lines": [{"index": b.index, "tokens": list(b.tokens), "cow_copies": b.cow_copies,
                          "cow_reuses": b.cow_reuses, "new_kv_pages": b.new_kv_pages,
                          **{k: (list(v) if isinstance(v, tuple) else v)
                             for k, v in b.fields.items()}}
                         for b in r.branches],
    }


def probe_record(run: ProbeRun, req: ProbeRequest) -> dict[str, object]:
    """A flat JSON-ready record of one run (for --json and the compare table)."""
    exp_max, exp_active = req.expected()
    rec: dict[str, object] = {
        "config": run.config.name, "lazy": run.config.lazy, "cow": run.config.cow,
        "command": run.command, "seconds": round(run.seconds, 2),
        "boot_seconds": None if run.boot_seconds is None else round(run.boot_seconds, 2),
        "expected_max_kv_pages": exp_max, "expected_active_pages_est": exp_active,
        "problem": run.problem,
    }
    r = run.result
    if r is not None:
        rec["error"] = r.error
        if r.summary:
            rec.update(max_kv_pages=r.summary.max_kv_pages,
                       actual_mapped_pages=r.summary.actual_mapped_pages,
                       saved_pages=r.summary.saved_pages, saved_percent=r.summary.saved_percent)
        if r.kv_capacity:
            rec["active_pages_est"] = r.kv_capacity.active_pages_est
        if r.reserve:
            rec.update(reserve_virtual_pages=r.reserve.virtual_pages,
                       reserve_mapped_pages=r.reserve.mapped_pages,
                       reserve_used_pages=r.reserve.used_pages)
        if r.decode:
            rec.update(decode_mapped_pages=r.decode.mapped_pages,
                       decode_used_pages=r.decode.used_pages)
        rec["verdict"] = r.verdict
        if r.parallel or r.fork or r.branches or r.fork_failures:
            rec["parallel"] = parallel_record(r)
        if r.trace:
            rec["trace"] = [[t.step, t.pos, t.kv_mapped_pages] for t in r.trace]
    else:
        rec["evidence"] = run.evidence
    return rec
