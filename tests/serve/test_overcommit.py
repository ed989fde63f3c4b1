"""smolserve --overcommit 1 (docs/smolserve.md, "Overcommit: recompute against swap"), in all
four configurations, with and without swap.

Six requests of 1024 slots each fill their whole reservation once their prompt is fed
(--test-fill 1), all admitted at once: together they need more pages than the guest has
free, which the test checks from the run's own start line. Without swap the kernel kills
workers (lazy sbrk) or refuses their reservations (eager sbrk) and the server runs them
again; with swap the kernel pages out and nothing is recomputed. Either way every request
completes, nothing leaks, and every answer is the one the same workload gets without
pressure (one calm run, in the first boot, is the reference: its answers are the same in
every configuration). One boot per configuration and swap size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_smolserve import shape

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import parse_serve
from nexos.programs.kvcache import max_kv_pages
from nexos.programs.serve import serve_command
from nexos.records import ServeResult

REPO = Path(__file__).resolve().parents[2]
MEMSIZE = 256   # the page cache holds the mapped model from 256 MiB up (kernel/pagecache.c)
SWAPSIZE = 512
WORK = ["--requests", "6", "--max-len", "1024", "--long-len", "1"]
CALM = serve_command(WORK)
PRESSED = serve_command([*WORK, "--overcommit", "1", "--test-fill", "1"])
RUN_TIMEOUT = 900.0
CASES = [(lz, cw, sw) for lz, cw in ((0, 0), (0, 1), (1, 0), (1, 1)) for sw in (0, SWAPSIZE)]


@pytest.fixture(scope="module", params=CASES,
                ids=[f"lazy{lz}-cow{cw}-swap{sw}" for lz, cw, sw in CASES])
def runs(request: pytest.FixtureRequest, build_kernel) -> tuple[BuildConfig, ServeResult,
                                                                  ServeResult, str]:
    """(config, the calm run, the pressed run, the pressed run's console)."""
    lz, cw, sw = request.param
    cfg = BuildConfig(lz, cw, memsize=MEMSIZE, cpus=2, swapsize=sw)
    build_kernel(cfg, llm=True)
    with QemuSession.for_config(cfg, REPO, llm=True) as s:
        if not _calm:   # the first boot of this worker's cases runs the calm workload
            _calm.append(parse_serve(s.run(CALM, timeout=RUN_TIMEOUT).output))
        pressed = s.run(PRESSED, timeout=RUN_TIMEOUT).output
    return cfg, _calm[0], parse_serve(pressed), pressed


# The calm run's answers are the model's arithmetic, which no kernel policy changes: one
# calm run per test process is the reference every pressed run is held to (and so the
# pressed runs of all eight cases are held equal to each other too).
_calm: list[ServeResult] = []


# long; the calm reference run is made once: one worker runs them all (tests/conftest.py)
pytestmark = [pytest.mark.long, pytest.mark.xdist_group("overcommit")]


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
    reservations = 6 * max_kv_pages(shape(1024))
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
    refuses reservations until there is room, and no page is swapped."""
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
            assert ps.recomputed == 0
            assert any(e.kind == "queue" and e.reason == "reserve_failed"
                       for e in pressed.events)
