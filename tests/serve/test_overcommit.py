"""smolserve --overcommit 1 (docs/smolserve.md, "Overcommit: recompute against swap"), in all
four configurations, with and without swap.

Six requests of 768 slots each fill their whole reservation once their prompt is fed
(--test-fill 1), all admitted at once, in the guest of `nexos serve --swap` (208 MiB, the
smallest whose page cache holds the mapped model): together they need about twice the pages
the guest has free, which the test checks from the run's own start line. Without swap the
kernel kills workers (lazy sbrk) or refuses their memory (eager sbrk) and the server
runs them again; with swap the kernel pages out and nothing is recomputed. Either way every request
completes, nothing leaks, and every answer is the one the same workload gets without
pressure (one calm run is the reference: its answers are the same in every configuration).
One boot per configuration and swap size, shared by the pytest-xdist workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_smolserve import shape

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import parse_serve
from nexos.programs.kvcache import max_kv_pages
from nexos.programs.serve import PRESSURE_MEMSIZE, serve_command
from nexos.records import ServeResult
from support import SharedRuns

REPO = Path(__file__).resolve().parents[2]
MEMSIZE = PRESSURE_MEMSIZE
SWAPSIZE = 512
SLOTS = 768
WORK = ["--requests", "6", "--max-len", str(SLOTS), "--long-len", "1"]
CALM = serve_command(WORK)
PRESSED = serve_command([*WORK, "--overcommit", "1", "--test-fill", "1"])
RUN_TIMEOUT = 900.0
CASES = [(lz, cw, sw) for lz, cw in ((0, 0), (0, 1), (1, 0), (1, 1)) for sw in (0, SWAPSIZE)]


def case_name(lz: int, cw: int, sw: int) -> str:
    return f"lazy{lz}-cow{cw}-swap{sw}"


# The calm run's answers are the model's arithmetic, which no kernel policy changes: one
# calm run (lazy1-cow1, no swap) is the reference every pressed run is held to (and so the
# pressed runs of all eight cases are held equal to each other too).
CALM_KEY = "calm"


@pytest.fixture(scope="session")
def consoles(build_kernel, tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """CALM_KEY or a case's name -> the console of its run: each made once per test run,
    for both pytest-xdist workers (SharedRuns), one boot each."""
    def boot(key: str) -> str:
        if key == CALM_KEY:
            cfg, cmd = BuildConfig(1, 1, memsize=MEMSIZE, cpus=2), CALM
        else:
            lz, cw, sw = next(c for c in CASES if case_name(*c) == key)
            cfg, cmd = BuildConfig(lz, cw, memsize=MEMSIZE, cpus=2, swapsize=sw), PRESSED
        build_kernel(cfg, llm=True)
        with QemuSession.for_config(cfg, REPO, llm=True) as s:
            return s.run(cmd, timeout=RUN_TIMEOUT).output
    return SharedRuns(tmp_path_factory, "overcommit",
                      [CALM_KEY, *(case_name(*c) for c in CASES)], boot)


@pytest.fixture(scope="module", params=CASES, ids=[case_name(*c) for c in CASES])
def runs(request: pytest.FixtureRequest, consoles: SharedRuns
         ) -> tuple[BuildConfig, ServeResult, ServeResult, str]:
    """(config, the calm run, the pressed run, the pressed run's console)."""
    lz, cw, sw = request.param
    pressed = consoles[case_name(lz, cw, sw)]
    calm = consoles[CALM_KEY]
    assert isinstance(pressed, str) and isinstance(calm, str)
    cfg = BuildConfig(lz, cw, memsize=MEMSIZE, cpus=2, swapsize=sw)
    return cfg, parse_serve(calm), parse_serve(pressed), pressed


pytestmark = pytest.mark.long


def test_every_request_completes_with_the_calm_answers(runs) -> None:  # type: ignore[no-untyped-def]
    cfg, calm, pressed, _ = runs
    assert calm.error is None and pressed.error is None, pressed.error
    assert calm.summary is not None and pressed.summary is not None
    assert pressed.summary.completed == pressed.summary.requests == 6
    assert [(r.id, r.answer_fnv, r.generated) for r in pressed.requests] == \
        [(r.id, r.answer_fnv, r.generated) for r in calm.requests]
    assert calm.pressure == () and calm.pressure_summary is None
    assert [p.id for p in pressed.pressure] == [r.id for r in pressed.requests]
    assert [p.attempts for p in pressed.pressure] == [r.attempts for r in pressed.requests]


def test_pressure_is_real_and_nothing_leaks(runs) -> None:  # type: ignore[no-untyped-def]
    cfg, _, pressed, _ = runs
    assert pressed.start is not None and pressed.memory is not None
    reservations = 6 * max_kv_pages(shape(SLOTS))
    assert reservations > pressed.start.free_pages   # they cannot all fill in RAM
    ps = pressed.pressure_summary
    assert ps is not None
    assert ps.swap_slots == SWAPSIZE * 256 if cfg.swapsize else ps.swap_slots == 0
    assert pressed.memory.leaked_pages == 0
    assert ps.recomputed == pressed.summary.recomputed  # type: ignore[union-attr]
    assert ps.recomputed_tokens == sum(p.recomputed_tokens for p in pressed.pressure)


def test_swap_pages_out_where_recompute_kills(runs) -> None:  # type: ignore[no-untyped-def]
    """With swap nothing is recomputed and pages went out and came back; without swap a
    lazy kernel kills (and the killed attempts had fed their prompts), an eager one
    refuses reservations (or forks) until there is room, and no page is swapped."""
    cfg, _, pressed, console = runs
    ps = pressed.pressure_summary
    assert ps is not None
    if cfg.swapsize:
        assert ps.recomputed == 0 and ps.recomputed_tokens == 0
        assert ps.swap_outs > 0
        if cfg.lazy:
            # the workers' own KV pages went out and came back. An eager kernel's worker
            # holds its vmlock through its whole sbrk, and reclaim passes a process whose
            # vmlock is busy (kernel/locks.h): there the pages that go out may all be the
            # server's, which it need not touch again before it exits (docs/fuzz.md,
            # "Known findings").
            assert ps.swap_ins > 0 and sum(p.paged_out for p in pressed.pressure) > 0
        assert "usertrap: " not in console
    else:
        assert ps.swap_outs == ps.swap_ins == ps.dropped_file_pages == 0
        assert all(p.paged_out == p.paged_in == 0 for p in pressed.pressure)
        if cfg.lazy:
            # every recompute is a kill; a kill may also take a worker that had already
            # sent its answer (the OOM killer takes the largest process, and a finished
            # worker still holds its whole KV cache until it exits): no recompute then
            kills = [ln for ln in console.splitlines() if "usertrap: " in ln]
            assert 0 < ps.recomputed <= len(kills)
            assert ps.recomputed == sum(p.attempts - 1 for p in pressed.pressure)
            assert ps.recomputed_tokens >= ps.recomputed   # each fed its prompt first
        else:
            # eager sbrk maps a whole reservation or fails: the kernel refuses the memory
            # (the reservation, or with memory that tight the next worker's fork) and the
            # server queues the request until a worker exits
            assert ps.recomputed == 0
            assert any(e.kind == "queue" and e.reason in ("reserve_failed", "fork_failed")
                       for e in pressed.events)
