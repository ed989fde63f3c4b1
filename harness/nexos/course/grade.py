"""Grading: every check on every configuration, with points and evidence.

A check that panics the kernel, hangs, or prints garbage fails with the console text as its
evidence; the session is rebooted and the remaining checks still run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from nexos.machine.build import build_all
from nexos.machine.config import MAX_SWAPSIZE, MIN_MEMSIZE, BuildConfig
from nexos.machine.qemu import QemuError, QemuSession
from nexos.parse import (
    ParseError,
    SmolprobeResult,
    find_panic,
    parse_smolprobe,
    parse_test_verdict,
)
from nexos.programs.kvcache import expected_verdict, saved_percent
from nexos.records import BRANCH_GEN_LEN, CheckResult, ProbeRequest


@dataclass(frozen=True)
class CheckSpec:
    name: str
    points: int
    llm: bool          # needs the LLM image
    command: str
    timeout: float
    judge: Callable[[BuildConfig, str], tuple[bool, str]]  # (config, output) -> (ok, message)
    small: bool = False  # boots the machine small_check_config(config) gives
    swap: bool = False   # boots the machine swap_check_config(config) gives (small, and a disk)


# The swap disk of a check that needs swap: SWAP_PER_RAM times the RAM, so that swaptest's
# tests get their full sizes (2x RAM in one heap, a copying fork of 1.5x RAM; docs/testing.md).
SWAP_PER_RAM = 4
# The RAM a small check (and a swap check) boots with, at most. Those checks fill RAM: lazytests'
# lazyoom and cowtests' fills fault in every free page, one at a time (about 5.5 s at 512 MiB
# in a lazy kernel, under 1 s at 32), and swaptest fills it several times over (about 23 s at
# 32 MiB, 52 s at 64, minutes at 512). What they prove (every page counted, out of memory
# met without a panic, pages moved between RAM and the disk) the smallest machine shows as
# well as 2 GiB.
SMALL_CHECK_MEMSIZE = MIN_MEMSIZE


def check_swapsize(cfg: BuildConfig) -> int:
    """MiB of swap a swap check boots with: SWAP_PER_RAM x RAM (at most the Makefile's
    limit), or the configuration's own (`--swap`) when that is larger."""
    return max(cfg.swapsize, min(SWAP_PER_RAM * cfg.memsize, MAX_SWAPSIZE))


def small_check_config(cfg: BuildConfig) -> BuildConfig:
    """The machine a small check of cfg boots: cfg's build and disks, at most
    SMALL_CHECK_MEMSIZE of RAM (the kernel finds its RAM at boot)."""
    return replace(cfg, memsize=min(cfg.memsize, SMALL_CHECK_MEMSIZE))


def swap_check_config(cfg: BuildConfig) -> BuildConfig:
    """The machine a swap check of cfg boots: small_check_config's, with check_swapsize's
    disk."""
    small = small_check_config(cfg)
    return replace(small, swapsize=check_swapsize(small))


def check_machine(cfg: BuildConfig, spec: CheckSpec) -> BuildConfig:
    """The machine `spec` boots when it grades cfg: cfg itself, or a small or swap check's."""
    if spec.swap:
        return swap_check_config(cfg)
    return small_check_config(cfg) if spec.small else cfg


def judge_test_program(cfg: BuildConfig, output: str) -> tuple[bool, str]:
    """A test program passes when its verdict is ALL TESTS PASSED (and nothing panicked)."""
    v = parse_test_verdict(output)
    if v.passed:
        return True, v.line
    failing = [x.strip() for x in output.splitlines() if "FAIL" in x and x.strip() != v.line]
    return False, "; ".join([*failing[:3], v.line])


def probe_tolerance(active: int) -> int:
    """Allowed distance between decode mapped pages and the estimate (stray non-KV pages)."""
    return max(2, active // 20)


def numbers_problems(res: SmolprobeResult, req: ProbeRequest) -> list[str]:
    """Where the printed numbers disagree with the formulas of docs/kvcache.md (empty:
    all agree)."""
    assert res.summary and res.kv_capacity and res.reserve and res.request
    exp_max, exp_active = req.expected()
    s, problems = res.summary, []
    want = {
        "request prompt_tokens": (res.request.prompt_tokens, len(req.prompt_tokens)),
        "request gen_tokens": (res.request.gen_tokens, req.gen_len),
        "kv_capacity max_pages": (res.kv_capacity.max_pages, exp_max),
        "kv_capacity active_pages_est": (res.kv_capacity.active_pages_est, exp_active),
        "SUMMARY max_kv_pages": (s.max_kv_pages, exp_max),
        "SUMMARY saved_pages": (s.saved_pages, s.max_kv_pages - s.actual_mapped_pages),
        "SUMMARY saved_percent": (s.saved_percent,
                                  saved_percent(s.max_kv_pages, s.actual_mapped_pages)),
        "reserve_phase virtual_pages": (res.reserve.virtual_pages, exp_max),
    }
    if res.decode is not None:
        want["SUMMARY actual_mapped_pages"] = (
            s.actual_mapped_pages, res.reserve.mapped_pages + res.decode.mapped_pages)
    for what, (got, exp) in want.items():
        if got != exp:
            problems.append(f"{what}={got}, expected {exp}")
    return problems


def judge_probe_numbers(req: ProbeRequest) -> Callable[[BuildConfig, str], tuple[bool, str]]:
    def judge(cfg: BuildConfig, output: str) -> tuple[bool, str]:
        res = parse_smolprobe(output)
        if res.error:
            return False, f"smolprobe error: {res.error}"
        problems = numbers_problems(res, req)
        return (not problems), ("; ".join(problems) or "all numbers match the formulas")
    return judge


def judge_probe_behaviour(req: ProbeRequest) -> Callable[[BuildConfig, str], tuple[bool, str]]:
    """Lazy build: reserve maps <= 1% and decode maps about the estimate; eager: reserve maps
    >= 90%. The printed verdict must be the one the reserve numbers imply."""
    def judge(cfg: BuildConfig, output: str) -> tuple[bool, str]:
        res = parse_smolprobe(output)
        if res.error:
            return False, f"smolprobe error: {res.error}"
        assert res.summary and res.reserve and res.decode and res.kv_capacity
        mx, reserve = res.summary.max_kv_pages, res.reserve.mapped_pages
        implied = expected_verdict(reserve, mx)
        want = "LAZY_STYLE" if cfg.lazy else "EAGER_STYLE"
        msg = (f"verdict={res.verdict} reserve mapped {reserve}/{mx}, "
               f"decode mapped {res.decode.mapped_pages}")
        if res.verdict != implied:
            return False, msg + f"; the numbers imply {implied}"
        if res.verdict != want:
            return False, msg + f"; a LAZY_ALLOC={cfg.lazy} kernel must give {want}"
        if cfg.lazy:
            est = res.kv_capacity.active_pages_est
            if abs(res.decode.mapped_pages - est) > probe_tolerance(est):
                return False, msg + f"; decode should map about active_pages_est={est}"
        return True, msg
    return judge


def judge_probe_error(cfg: BuildConfig, output: str) -> tuple[bool, str]:
    """An impossible request must give `[smolprobe] error:` and no fault."""
    res = parse_smolprobe(output, require_complete=False)
    if res.error is None:
        return False, "no `[smolprobe] error:` line for an impossible request"
    if "usertrap:" in output:
        return False, "smolprobe faulted instead of reporting the error"
    return True, f"error: {res.error}"


def judge_parallel(cfg: BuildConfig, output: str) -> tuple[bool, str]:
    """--samples: the COW build copies fewer pages than eager copying would."""
    res = parse_smolprobe(output)
    if res.error:
        return False, f"smolprobe error: {res.error}"
    p = res.parallel
    if p is None or res.fork is None:
        return False, "no fork_phase / PARALLEL_SUMMARY line"
    msg = (f"branches={p.branches} eager_copy_pages={p.eager_copy_pages} "
           f"actual_copied_pages={p.actual_copied_pages} saved_pages={p.saved_pages}")
    if p.saved_pages != p.eager_copy_pages - p.actual_copied_pages:
        return False, msg + "; saved_pages != eager_copy_pages - actual_copied_pages"
    if cfg.cow and res.fork.shared_pages_at_fork <= 0:
        # a copying fork makes no COW copies either, so the copy count alone would pass it
        # (the figure is shared less the mapped model's pages: a kernel that counts no
        # sharing at all gives a negative number)
        return False, msg + "; a COW kernel must share the parent's pages at fork"
    if cfg.cow and p.actual_copied_pages >= p.eager_copy_pages:
        return False, msg + "; a COW kernel must copy fewer pages than eager copying"
    return True, msg


# The boot of a grading session and the hard cap on its QEMU process, in seconds, before
# the timeout scale (docs/harness.md, "Grading").
BOOT_TIMEOUT = 120.0
SESSION_LIFETIME = 7200.0


def timeout_scale(text: str | float) -> float:
    """`--timeout-scale` / NEXOS_TIMEOUT_SCALE -> the factor; ValueError unless it is a
    finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{str(text)!r} is not a number (a positive factor such as 2)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{str(text)!r} is not a positive number (a factor such as 2)")
    return value


def default_checks(req: ProbeRequest | None = None, scale: float = 1.0) -> list[CheckSpec]:
    """The grading checks, in the order they run."""
    req = req or ProbeRequest()
    impossible = ProbeRequest(req.prompt_tokens, 1_000_000)
    par = ProbeRequest(req.prompt_tokens, BRANCH_GEN_LEN, samples=4)
    return [
        # the quick subset, as MIT's lab graders run it: the slow tests (pipebig, bigfile,
        # manyfiles, sbrkfork, forkfill, oom) are a kernel's, not a lab's, and the suite runs
        # them in every configuration (docs/testing.md); lazytests has its own lazyoom
        CheckSpec("usertests", 20, False, "usertests -q", 600 * scale, judge_test_program),
        CheckSpec("lazytests", 15, False, "lazytests", 600 * scale, judge_test_program,
                  small=True),
        CheckSpec("cowtests", 15, False, "cowtests", 600 * scale, judge_test_program,
                  small=True),
        CheckSpec("mmaptests", 15, False, "mmaptests", 600 * scale, judge_test_program),
        CheckSpec("swaptest", 15, False, "swaptest", 3600 * scale, judge_test_program,
                  swap=True),
        CheckSpec("smolprobe-numbers", 10, True, req.command(), 900 * scale,
                  judge_probe_numbers(req)),
        CheckSpec("smolprobe-verdict", 10, True, req.command(), 900 * scale,
                  judge_probe_behaviour(req)),
        CheckSpec("smolprobe-errors", 5, True, impossible.command(), 300 * scale,
                  judge_probe_error),
        CheckSpec("smolprobe-parallel", 10, True, par.command(), 1800 * scale, judge_parallel),
    ]


CHECK_NAMES = tuple(c.name for c in default_checks())
# Opt-in checks: a plain `nexos grade` skips them; `--checks` or a lab's plan adds them
# (docs/harness.md, "Grading"; docs/lab.md).
OPT_IN_CHECK_NAMES = ("mmaptests", "swaptest", "smolprobe-parallel")
DEFAULT_CHECK_NAMES = tuple(n for n in CHECK_NAMES if n not in OPT_IN_CHECK_NAMES)
# The checks that run a test program by its own name: a hidden program of that name replaces
# the built-in program on the image (make's EXTRA_UPROGS rule), and so its check too.
PROGRAM_CHECK_NAMES = tuple(c.name for c in default_checks() if c.command.split()[0] == c.name)
HIDDEN_POINTS = 10

# What grading runs: each configuration with its checks, in order.
Plan = list[tuple[BuildConfig, list["CheckSpec"]]]


def select_checks(names: Sequence[str], scale: float = 1.0) -> list[CheckSpec]:
    """The checks called `names`, in the order they run; ValueError naming any unknown."""
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; "
                         f"known: {', '.join(CHECK_NAMES)}")
    return [c for c in default_checks(scale=scale) if c.name in names]


def hidden_checks(values: Sequence[str], scale: float = 1.0
                  ) -> tuple[list[Path], list[CheckSpec]]:
    """`tests/hidden/foo.c:25` -> the source (absolute) and a check `foo` worth 25 points
    (HIDDEN_POINTS without `:N`) that passes on ALL TESTS PASSED. A program named like a
    built-in test program (lazytests.c) is allowed: it replaces that program and its check
    (with_hidden). ValueError quoting the value for a missing file or a name that is taken."""
    sources: list[Path] = []
    specs: list[CheckSpec] = []
    for v in values:
        path, _, pts = v.rpartition(":") if v.rpartition(":")[2].isdigit() else (v, "", "")
        src = Path(path).resolve()
        if src.suffix != ".c" or not src.is_file():
            raise ValueError(f"{v!r}: need an existing .c file")
        taken = src.stem in CHECK_NAMES and src.stem not in PROGRAM_CHECK_NAMES
        if taken or any(s.name == src.stem for s in specs):
            raise ValueError(f"{v!r}: the name {src.stem} is taken")
        sources.append(src)
        specs.append(CheckSpec(src.stem, int(pts or HIDDEN_POINTS), False, src.stem,
                               600 * scale, judge_test_program))
    return sources, specs


def with_hidden(checks: list[CheckSpec], hidden: list[CheckSpec]) -> list[CheckSpec]:
    """`checks` then the hidden ones; a hidden check replaces the built-in of its name, and
    boots as it did (a hidden lazytests.c gets the small machine, swaptest.c the swap disk)."""
    builtin = {c.name: c for c in default_checks()}
    names = {h.name for h in hidden}

    def boots_as_builtin(h: CheckSpec) -> CheckSpec:
        b = builtin.get(h.name)
        return replace(h, small=b.small, swap=b.swap) if b else h
    return ([c for c in checks if c.name not in names]
            + [boots_as_builtin(h) for h in hidden])


class _Sessions:
    """At most one live session per image kind and machine (check_machine); rebooted after
    a check killed it."""

    def __init__(self, repo: Path, cfg: BuildConfig, transcript_dir: Path | None,
                 scale: float = 1.0) -> None:
        self.repo, self.cfg, self.dir, self.scale = repo, cfg, transcript_dir, scale
        self.live: dict[tuple[bool, BuildConfig], QemuSession] = {}

    def get(self, spec: CheckSpec) -> QemuSession:
        """The session for spec's image (llm or not) on spec's machine."""
        cfg = check_machine(self.cfg, spec)
        key = (spec.llm, cfg)
        s = self.live.get(key)
        if s is None or not s.alive:
            t = None
            if self.dir is not None:
                t = self.dir / (f"{cfg.name}{'-llm' if spec.llm else ''}"
                                f"{f'-swap{cfg.swapsize}' if cfg.swapsize else ''}.log")
            s = QemuSession.for_config(cfg, self.repo, llm=spec.llm, transcript=t,
                                       boot_timeout=BOOT_TIMEOUT * self.scale,
                                       lifetime=SESSION_LIFETIME * self.scale).start()
            self.live[key] = s
        return s

    def close(self, spec: CheckSpec | None = None) -> None:
        """Stop spec's session (every session without spec). A swap check's is stopped
        after its check: its disk holds up to SWAP_PER_RAM x RAM of written pages, and no
        later check needs it (each swap check boots its own)."""
        keys = list(self.live) if spec is None else [(spec.llm, check_machine(self.cfg, spec))]
        for key in keys:
            s = self.live.pop(key, None)
            if s is not None:
                s.close()


def run_check(sessions: _Sessions, spec: CheckSpec, cache: dict[str, str]) -> CheckResult:
    """One check; never raises for kernel/QEMU/parse trouble (that is a failed check)."""
    cfg = sessions.cfg
    t0 = time.monotonic()

    def fail(msg: str, evidence: str = "") -> CheckResult:
        return CheckResult(cfg.name, spec.name, False, 0, spec.points,
                           time.monotonic() - t0, msg, evidence[-3000:])
    try:
        output = cache.get(spec.command)
        if output is None:
            output = sessions.get(spec).run(spec.command, spec.timeout).output
            cache[spec.command] = output
    except QemuError as e:
        return fail(str(e), e.evidence)
    panic = find_panic(output)
    if panic:
        return fail(panic, output)
    try:
        ok, msg = spec.judge(cfg, output)
    except ParseError as e:
        return fail(str(e.args[0]), e.text)
    return CheckResult(cfg.name, spec.name, ok, spec.points if ok else 0, spec.points,
                       time.monotonic() - t0, msg, "" if ok else output[-3000:])


def grade_config(repo: Path, cfg: BuildConfig, checks: list[CheckSpec],
                 transcript_dir: Path | None = None,
                 on_result: Callable[[CheckResult], None] | None = None,
                 timeout_scale: float = 1.0) -> list[CheckResult]:
    """Run `checks` on one configuration; one result per check, in order. The checks carry
    their own (scaled) time limits; timeout_scale stretches the sessions' boot and life."""
    sessions = _Sessions(repo, cfg, transcript_dir, timeout_scale)
    cache: dict[str, str] = {}  # the same smolprobe command is run once per configuration
    results = []
    try:
        for spec in checks:
            r = run_check(sessions, spec, cache)
            if spec.swap:
                sessions.close(spec)
            results.append(r)
            if on_result:
                on_result(r)
    finally:
        sessions.close()
    return results


def grade_all(repo: Path, plan: Plan, hidden_sources: Sequence[Path] = (), build: bool = True,
              transcript_dir: Path | None = None, console: Console | None = None,
              on_result: Callable[[CheckResult], None] | None = None,
              timeout_scale: float = 1.0, jobs: int = 1) -> list[CheckResult]:
    """Build the plan's configurations (unless not `build`; the hidden sources go to make as
    EXTRA_UPROGS) and run each one's checks, `jobs` configurations at a time (each boots its
    own QEMU; the results come back in plan order). A configuration that does not build
    fails a `build` check and is not booted; the others go on. timeout_scale stretches each
    session's boot and lifetime (the plan's checks carry their scaled limits)."""
    results: list[CheckResult] = []
    configs = [cfg for cfg, _ in plan]
    if build:
        extra = (f"EXTRA_UPROGS={' '.join(map(str, hidden_sources))}",) if hidden_sources else ()
        llm = any(c.llm for _, checks in plan for c in checks)
        for b in build_all(repo, configs, llm=llm, console=console, extra=extra):
            if not b.ok:
                results.append(CheckResult(b.config.name, "build", False, 0, 0, b.seconds,
                                           b.last_error, b.excerpt))
    broken = {r.config for r in results}
    if transcript_dir is not None:
        transcript_dir.mkdir(parents=True, exist_ok=True)

    def one(item: tuple[BuildConfig, list[CheckSpec]]) -> list[CheckResult]:
        return grade_config(repo, item[0], item[1], transcript_dir, on_result, timeout_scale)
    todo = [(cfg, checks) for cfg, checks in plan if cfg.name not in broken]
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo) or 1))) as pool:
        for config_results in pool.map(one, todo):
            results += config_results
    return results
