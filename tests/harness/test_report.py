"""Records, tables and grading judges on smolprobe's real output (no QEMU needed).

Every run here is a transcript under tests/transcripts/ that scripts/transcripts.py captured
from a real guest (see its README); nothing is typed by hand.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from rich.console import Console

from nexos.course.grade import (
    judge_parallel,
    judge_probe_behaviour,
    judge_probe_error,
    judge_probe_numbers,
    numbers_problems,
)
from nexos.machine.config import BuildConfig
from nexos.parse import parse_smolprobe
from nexos.programs.compare import ProbeRun, probe_record
from nexos.programs.tables import compare_table, formulas_note, parallel_table, records_json
from nexos.records import ProbeRecord, ProbeRequest

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts"
EAGER, LAZY, COW = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(1, 1)
SEED = ProbeRequest()  # smolprobe --prompt-tokens 1,2,3 --gen-len 10
SAMPLES4 = ProbeRequest(samples=4)

# The keys of `nexos compare --json` (docs/harness.md, "JSON records").
RUN_KEYS = {"config", "lazy", "cow", "command", "samples", "seconds", "boot_seconds",
            "expected_max_kv_pages", "expected_active_pages_est", "problem"}
SINGLE_KEYS = RUN_KEYS | {"error", "verdict", "max_kv_pages", "actual_mapped_pages",
                          "saved_pages", "saved_percent", "active_pages_est",
                          "reserve_virtual_pages", "reserve_mapped_pages",
                          "reserve_used_pages", "decode_mapped_pages", "decode_used_pages"}
SAMPLES_KEYS = RUN_KEYS | {"error", "verdict", "active_pages_est", "reserve_virtual_pages",
                           "reserve_mapped_pages", "reserve_used_pages", "parallel"}
PARALLEL_KEYS = {"branches", "forked", "shared_pages_at_fork", "prefix_kv_pages",
                 "eager_copy_pages", "actual_copied_pages", "saved_pages", "saved_percent",
                 "cow_copies", "cow_reuses", "new_kv_pages", "verdict", "fork_failures",
                 "killed", "unstarted", "branch_lines"}


def transcript(name: str) -> tuple[str, str]:
    """(command, output) of tests/transcripts/<name>.txt: the header's command after `$ `,
    and the captured output below the header."""
    header, _, output = (TRANSCRIPTS / f"{name}.txt").read_text().partition("\n")
    assert header.startswith("# ") and "$ " in header, header
    return header.split("$ ", 1)[1].strip(), output


def record(name: str, config: BuildConfig, req: ProbeRequest | None = None) -> ProbeRecord:
    """The record of a transcript, as `nexos compare` makes it from a run of `req` (by
    default the request that the transcript's command spells)."""
    command, output = transcript(name)
    if req is None:
        req = ProbeRequest.from_args(shlex.split(command)[1:])
    else:
        assert command == req.command(), (command, req.command())
    run = ProbeRun(config, command, parse_smolprobe(output), seconds=10.0, output=output)
    return probe_record(run, req)


def killed_record() -> ProbeRecord:
    """A --samples 3 run whose branch 1 was killed: the host test build's transcript (the
    test hook that kills it is not in the guest's smolprobe); the host shim maps lazily."""
    return record("host-samples3-killed", LAZY)


@pytest.fixture(scope="module")
def seed_records() -> list[ProbeRecord]:
    return [record("guest-seed-lazy0-cow0", EAGER, SEED),
            record("guest-seed-lazy1-cow0", LAZY, SEED)]


@pytest.fixture(scope="module")
def samples_records() -> list[ProbeRecord]:
    return [record("guest-samples4-lazy1-cow0", LAZY, SAMPLES4),
            record("guest-samples4-lazy1-cow1", COW, SAMPLES4)]


def rendered(width: int, *renderables: object) -> str:
    console = Console(width=width, record=True, color_system=None)
    for r in renderables:
        console.print(r)
    return console.export_text()


def widest(text: str) -> int:
    return max(len(line.rstrip()) for line in text.splitlines())


# --------------------------------------------------------------------------- tables

def test_compare_table_fits_80_columns(seed_records):
    """The main demo's table reads whole in a plain 80-column terminal (and in CI logs,
    where rich assumes 80 columns)."""
    text = rendered(80, compare_table(seed_records, SEED.command()), formulas_note(seed_records))
    assert "…" not in text and widest(text) <= 80
    eager, lazy = seed_records
    assert eager.numbers is not None and lazy.numbers is not None
    for rec in seed_records:
        n = rec.numbers
        assert n is not None
        row = next(line for line in text.splitlines() if line.startswith(rec.config))
        assert f"{n.saved_pages} ({n.saved_percent}%)" in row
        assert f"{n.reserve_mapped_pages}/{n.reserve_used_pages}" in row
        assert f"{n.decode_mapped_pages}/{n.decode_used_pages}" in row
        assert str(n.verdict) in row
    assert "EAGER_STYLE" in text and "LAZY_STYLE" in text
    assert "docs/kvcache.md formulas: max_kv_pages=2880 active_pages_est=180" in text
    assert SEED.command() in text


def test_compare_table_leaves_the_samples_runs_to_the_parallel_table(seed_records,
                                                                      samples_records):
    text = rendered(80, compare_table(seed_records + samples_records))
    assert len([line for line in text.splitlines() if line.startswith("lazy1-")]) == 1
    assert "COW_STYLE" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_parallel_table_fits_the_terminal(samples_records, width):
    # eager sbrk and fork with 2048 slots: the fourth fork runs out of memory
    oom = record("guest-samples6-oom-lazy0-cow0", EAGER)
    table = parallel_table([*samples_records, oom, killed_record()])
    text = rendered(width, table)
    assert "…" not in text and widest(text) <= width
    copying, cow = (r.numbers.parallel for r in samples_records if r.numbers)
    assert copying is not None and cow is not None and oom.numbers is not None
    failed = oom.numbers.parallel
    assert failed is not None and failed.forked < 6
    assert "EAGER_FORK_STYLE" in text and "COW_STYLE" in text
    assert f"{copying.forked}/4" in text and f"{failed.forked}/6" in text
    assert f"{cow.saved_pages} ({cow.saved_percent}%)" in text
    flat = " ".join(text.split())  # the caption may wrap
    assert " ".join(failed.fork_failures[0].split()) in flat
    assert "branch 1 killed before reporting" in flat
    assert SAMPLES4.command() in flat


def test_no_parallel_table_without_samples_runs(seed_records):
    assert parallel_table(seed_records) is None


# --------------------------------------------------------------------------- JSON records

def test_single_record_json_keys_and_values(seed_records):
    data = json.loads(records_json(seed_records))
    assert [set(d) for d in data] == [SINGLE_KEYS, SINGLE_KEYS]
    eager, lazy = data
    assert (eager["config"], eager["lazy"], eager["cow"]) == ("lazy0-cow0", 0, 0)
    assert eager["verdict"] == "EAGER_STYLE" and lazy["verdict"] == "LAZY_STYLE"
    for d in data:
        assert d["command"] == SEED.command() and d["samples"] is None
        assert (d["expected_max_kv_pages"], d["expected_active_pages_est"]) == SEED.expected()
        assert d["saved_pages"] == d["max_kv_pages"] - d["actual_mapped_pages"]
        assert d["actual_mapped_pages"] == d["reserve_mapped_pages"] + d["decode_mapped_pages"]
        assert d["problem"] is None and d["error"] is None


def test_samples_record_json_keys_and_numbers(samples_records):
    data = [r.to_json() for r in samples_records]
    assert [set(d) for d in data] == [SAMPLES_KEYS, SAMPLES_KEYS]
    copying, cow = (d["parallel"] for d in data)
    for p in (copying, cow):
        assert set(p) == PARALLEL_KEYS
        assert p["branches"] == 4
        assert p["saved_pages"] == p["eager_copy_pages"] - p["actual_copied_pages"]
        assert p["cow_copies"] == sum(b["cow_copies"] for b in p["branch_lines"])
        assert p["new_kv_pages"] == sum(b["new_kv_pages"] for b in p["branch_lines"])
        assert [b["index"] for b in p["branch_lines"]] == list(range(p["forked"]))
    assert copying["verdict"] == "EAGER_FORK_STYLE" and cow["verdict"] == "COW_STYLE"
    # the mapped weights are shared: a copying fork copies the anonymous pages only, and
    # four fit (the out-of-memory fork: test_parallel_table_fits_the_terminal)
    assert copying["forked"] == 4 and copying["fork_failures"] == []
    assert copying["actual_copied_pages"] == copying["eager_copy_pages"]
    assert cow["forked"] == 4 and cow["fork_failures"] == []
    assert cow["actual_copied_pages"] < cow["eager_copy_pages"]
    # keys beyond the named ones come through as smolprobe printed them
    first = cow["branch_lines"][0]
    assert {"state_pages", "kv_copies", "kv_reuses", "fork_pages"} <= set(first)
    assert all(isinstance(t, int) for t in first["tokens"])


def test_killed_branch_is_in_the_record():
    p = killed_record().to_json()["parallel"]
    assert p["forked"] == 3 and [b["index"] for b in p["branch_lines"]] == [0, 2]
    assert p["killed"] and p["killed"][0].startswith("branch 1 killed before reporting")


def test_failed_run_record_carries_the_evidence():
    command, output = transcript("guest-seed-lazy1-cow0")
    run = ProbeRun(LAZY, command, None, problem="kernel panic: ...", evidence=output)
    d = probe_record(run, SEED).to_json()
    assert set(d) == RUN_KEYS | {"evidence"}
    assert d["problem"] == "kernel panic: ..." and d["evidence"] == output


# --------------------------------------------------------------------------- grading judges

def test_grade_judges_the_seed_runs():
    _, lazy_out = transcript("guest-seed-lazy1-cow0")
    _, eager_out = transcript("guest-seed-lazy0-cow0")
    assert numbers_problems(parse_smolprobe(lazy_out), SEED) == []
    assert judge_probe_numbers(SEED)(LAZY, lazy_out)[0]
    assert judge_probe_numbers(SEED)(EAGER, eager_out)[0]
    assert judge_probe_behaviour(SEED)(LAZY, lazy_out)[0]
    assert judge_probe_behaviour(SEED)(EAGER, eager_out)[0]
    ok, msg = judge_probe_behaviour(SEED)(EAGER, lazy_out)  # a lazy result on an eager build
    assert not ok and "must give EAGER_STYLE" in msg
    ok, msg = judge_probe_behaviour(SEED)(LAZY, eager_out)
    assert not ok and "must give LAZY_STYLE" in msg


def test_grade_numbers_judge_names_what_disagrees():
    """The seed run judged against another request: the judge names each line that does
    not match the formulas for that request."""
    _, lazy_out = transcript("guest-seed-lazy1-cow0")
    ok, msg = judge_probe_numbers(ProbeRequest(gen_len=20))(LAZY, lazy_out)
    assert not ok
    assert "request gen_tokens=10, expected 20" in msg
    assert "kv_capacity active_pages_est=180, expected 300" in msg


def test_grade_judges_the_samples_runs():
    _, cow_out = transcript("guest-samples4-lazy1-cow1")
    _, copying_out = transcript("guest-samples4-lazy1-cow0")
    ok, msg = judge_parallel(COW, cow_out)
    assert ok and "branches=4" in msg
    ok, msg = judge_parallel(LAZY, copying_out)
    assert ok, msg  # a copying kernel passes with what it forked


def test_grade_error_judge():
    _, out = transcript("guest-error-lazy1-cow1")
    ok, msg = judge_probe_error(COW, out)
    assert ok and "exceeds seq-len" in msg
    _, lazy_out = transcript("guest-seed-lazy1-cow0")
    assert not judge_probe_error(LAZY, lazy_out)[0]
