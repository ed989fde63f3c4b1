"""`nexos serve --swap MiB` (no QEMU): which workloads it runs on which kernels, both ways;
the side-by-side table and --json from what smolserve really printed; what counts as a
failed comparison. The README's line itself runs on real kernels in
tests/docs/test_readme_commands.py.

The command runs through click's CliRunner with the build skipped and QemuSession replaced
by a fake shell that answers smolserve with the real overcommitted transcripts of a boot
without swap and one with a 512 MiB swap disk (tests/transcripts/serve-overcommit-*), so
the path from the options to the table is the real one but the kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import nexos.programs.cli as cli_mod
from nexos.cli import cli
from nexos.machine.config import BuildConfig
from nexos.parse import parse_serve
from nexos.programs.serve import (
    PRESSURE_FLAGS,
    PRESSURE_MEMSIZE,
    PRESSURE_WORKLOADS,
    pressure_workloads,
    serve_workload,
)
from nexos.records import ServeRecord, SwapComparison

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts"


def body(name: str) -> str:
    return (TRANSCRIPTS / f"{name}.txt").read_text(encoding="utf-8").partition("\n")[2]


NO_SWAP = body("serve-overcommit-mem256-lazy1-cow1")
SWAP = body("serve-overcommit-swap512-mem256-lazy1-cow1")


class FakeOutput:
    def __init__(self, output: str) -> None:
        self.output = output


class FakeShell:
    """A booted kernel of `cfg`: smolserve prints the transcript of a boot with or without
    swap, as cfg says; every boot is recorded with what was typed."""

    def __init__(self, cfg: BuildConfig, boots: list[tuple[BuildConfig, list[str]]]) -> None:
        self.cfg, self.typed = cfg, []
        boots.append((cfg, self.typed))

    def __enter__(self) -> FakeShell:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, cmd: str, timeout: float = 60.0) -> FakeOutput:
        self.typed.append(cmd)
        if not cmd.startswith("smolserve"):
            return FakeOutput("")
        return FakeOutput(SWAP if self.cfg.swapsize else NO_SWAP)


@pytest.fixture
def boots(monkeypatch: pytest.MonkeyPatch, repo: Path) -> list[tuple[BuildConfig, list[str]]]:
    """Every boot `nexos serve --swap` makes: (its configuration, what was typed)."""
    made: list[tuple[BuildConfig, list[str]]] = []
    monkeypatch.setattr(cli_mod, "prepare", lambda configs, llm, no_build: repo)
    monkeypatch.setattr(cli_mod.QemuSession, "for_config",
                        lambda cfg, *args, **kwargs: FakeShell(cfg, made))
    return made


def serve(*args: str) -> Result:
    return CliRunner().invoke(cli, ["serve", "--no-build", *args], terminal_width=200)


# ------------------------------------------------------------------ the workloads

def test_no_workload_is_the_three_pressure_workloads() -> None:
    got = pressure_workloads(None)
    assert [label for label, _ in got] == ["short", "medium", "long"]
    for (label, args), (_, n, max_len) in zip(got, PRESSURE_WORKLOADS, strict=True):
        assert args == ["--requests", str(n), "--max-len", str(max_len),
                        *PRESSURE_FLAGS], label


def test_a_given_workload_runs_overcommitted() -> None:
    load = serve_workload(None, 4, 512, seed=2)
    assert pressure_workloads(load) == [("given", [*load.args, "--overcommit", "1",
                                                   "--test-fill", "1"])]


# ------------------------------------------------------------------ the command

def test_swap_with_no_workload_boots_each_workload_without_and_with_swap(boots) -> None:
    r = serve("--swap", "512")
    assert r.exit_code == 0, (r.output, r.exception)
    assert [(c.name, c.memsize, c.swapsize) for c, _ in boots] == [
        (f"lazy1-cow1-mem{PRESSURE_MEMSIZE}", PRESSURE_MEMSIZE, swap)
        for _ in PRESSURE_WORKLOADS for swap in (0, 512)]
    commands = [typed[-1] for _, typed in boots]
    for i, (_, n, max_len) in enumerate(PRESSURE_WORKLOADS):
        want = f"smolserve --requests {n} --max-len {max_len} --overcommit 1 --test-fill 1"
        assert commands[2 * i] == commands[2 * i + 1] == want


def test_the_table_puts_both_ways_side_by_side(boots) -> None:
    r = serve("--swap", "512")
    assert "recompute (no swap) vs swap (512 MiB)" in r.stdout
    assert "every request completed, with the same answers without swap and with" in r.stdout
    rows = [m.groups() for m in re.finditer(r"^\s*(short|medium|long) +(lazy\d-cow\d) +(.*)$",
                                            r.stdout, re.M)]
    assert [(w, k) for w, k, _ in rows] == [(w, "lazy1-cow1") for w, _, _ in PRESSURE_WORKLOADS]
    without, with_swap = parse_serve(NO_SWAP), parse_serve(SWAP)
    pa, pb = without.pressure_summary, with_swap.pressure_summary
    assert pa is not None and pb is not None
    n = len(without.requests)
    # done, recomputed, tokens fed again, wall s | done, recomputed, pages out, pages in, wall s
    want = [f"{pa.completed}/{n}", str(pa.recomputed), str(pa.recomputed_tokens),
            f"{pa.wall_ms / 1000:.1f}", f"{pb.completed}/{n}", str(pb.recomputed),
            str(pb.swap_outs), str(pb.swap_ins), f"{pb.wall_ms / 1000:.1f}"]
    for _, _, cells in rows:
        assert cells.split() == want, r.stdout


def test_json_holds_both_records_of_each_pair(boots) -> None:
    r = serve("--swap", "512", "--json")
    assert r.exit_code == 0, r.output
    pairs = json.loads(r.stdout)
    assert [p["workload"] for p in pairs] == ["short", "medium", "long"]
    for p in pairs:
        assert p["swap_mib"] == 512 and p["same_answers"] is True and p["problem"] is None
        assert p["without_swap"]["pressure_summary"]["swap_outs"] == 0
        assert p["with_swap"]["pressure_summary"]["swap_outs"] > 0
        assert p["without_swap"]["pressure_summary"]["recomputed"] > 0


def test_matrix_and_mem_and_a_given_workload(boots) -> None:
    r = serve("--swap", "64", "--matrix", "--mem", "384", "--requests", "6",
              "--max-len", "2048")
    assert r.exit_code == 0, r.output
    assert [(c.lazy, c.cow, c.memsize, c.swapsize) for c, _ in boots] == [
        (lz, cw, 384, swap) for lz, cw in ((0, 0), (0, 1), (1, 0), (1, 1)) for swap in (0, 64)]
    assert {typed[-1] for _, typed in boots} == {
        "smolserve --requests 6 --max-len 2048 --overcommit 1 --test-fill 1"}
    assert len(re.findall(r"^\s*given +lazy\d-cow\d ", r.stdout, re.M)) == 4


@pytest.mark.parametrize("args, why", [
    (["--seed", "3"], "--seed goes with a given workload"),
    (["--no-share-prefix"], "--no-share-prefix goes with a given workload"),
    (["--requests", "4"], "--requests needs --max-len"),
    (["--swap", "0"], "0 is not in the range"),
])
def test_a_swap_run_refuses_mistakes_before_booting(boots, args: list[str], why: str) -> None:
    r = serve(*(args if args[0] == "--swap" else ["--swap", "512", *args]))
    assert r.exit_code == 2 and why in r.output, r.output
    assert "Traceback" not in r.output and boots == []


# ------------------------------------------------------------------ a failed comparison

def record(text: str, problem: str | None = None) -> ServeRecord:
    return ServeRecord("lazy1-cow1", 1, 1, 2, "smolserve", 1.0, problem, parse_serve(text))


def test_a_clean_pair_has_no_problem() -> None:
    assert SwapComparison("long", 512, record(NO_SWAP), record(SWAP)).problem is None


def test_different_answers_are_a_problem() -> None:
    res = parse_serve(SWAP)
    first = replace(res.requests[0], answer_fnv=res.requests[0].answer_fnv ^ 1)
    other = ServeRecord("lazy1-cow1", 1, 1, 2, "smolserve", 1.0, None,
                        replace(res, requests=(first, *res.requests[1:])))
    c = SwapComparison("long", 512, record(NO_SWAP), other)
    assert not c.same_answers and c.problem == "the answers differ with and without swap"


def test_a_failed_run_or_no_overcommit_is_a_problem() -> None:
    hung = ServeRecord("lazy1-cow1", 1, 1, 2, "smolserve", 1.0, "timed out", None)
    assert SwapComparison("long", 512, record(NO_SWAP), hung).problem == "with swap: timed out"
    plain = body("serve-generated-lazy1-cow0")
    assert "no PRESSURE_SUMMARY" in (SwapComparison("x", 512, record(plain), record(SWAP))
                                     .problem or "")


def test_a_failed_pair_fails_the_command(monkeypatch: pytest.MonkeyPatch, boots) -> None:
    monkeypatch.setattr(FakeShell, "run", lambda self, cmd, timeout=60.0: FakeOutput(
        "" if not cmd.startswith("smolserve") else
        NO_SWAP if not self.cfg.swapsize else "[smolserve] loading LLM assets...\n"))
    r = serve("--swap", "512")
    assert r.exit_code == 1
    assert "with swap:" in r.stdout and "Traceback" not in r.output
