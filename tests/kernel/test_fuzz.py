"""`fuzz` and `nexos fuzz` (docs/fuzz.md).

Without QEMU: the parser and the records on real transcripts (below, captured from real
runs), and the command's bad options (one line, no traceback). Booted for real: the README's
`nexos fuzz` at its defaults (a short run in each of the four configurations, two harts)
and runs with a swap disk and the hog in two configurations, each clean: no FAIL line, no
process killed, every page, swap slot and page-cache page back.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig, matrix
from nexos.machine.fuzz import (
    DEFAULT_PROCS,
    DEFAULT_SEED,
    fuzz_command,
    fuzz_cpus,
    fuzz_record,
    parse_fuzz,
    run_fuzz,
)
from nexos.machine.qemu import KernelPanic, QemuTimeout
from nexos.parse import ParseError
from support import SMALL_MEMSIZE, SMALL_SWAPSIZE, build_locks

ROOT = Path(__file__).resolve().parents[2]

# `fuzz --ops 300 --seed 3` on lazy1-cow1, 2 harts, as the console showed it (captured from a
# real run; the kernel's complaints about unknown system calls included).
CLEAN = (
    "fuzz: start seed=3 procs=4 ops=300 seconds=0 lazy=1 cow=1 harts=2"
    " total_pages=130231 swap_slots=0\n"
    "4 fuzz: unknown sys call 0\n"
    "6 fuzz: unknown sys call -1\n"
    "test workers: OK\n"
    "test leakcheck: OK\n"
    "fuzz: done seed=3 procs=4 calls=1528 forks=36 kills=18 failures=0 faults_killed=0"
    " leaked_pages=0 leaked_cache=0 swap_slots_used=0->0 swap_outs=0 swap_ins=0"
    " seconds=2\n"
    "ALL TESTS PASSED\n"
)

# `fuzz --seconds 6 --procs 2 --seed 5 &` at the shell of lazy1-cow1 (2 harts), then `kill 5`
# (worker 1) and `echo .` until the verdict came: a real failed run, the shell's lines in it.
KILLED = (
    "fuzz: start seed=5 procs=2 ops=0 seconds=6 lazy=1 cow=1 harts=2 total_pages=130231"
    " swap_slots=0\n"
    "5 fuzz: unknown sys call -1\n"
    "4 fuzz: unknown sys call 1000\n"
    "4 fuzz: unknown sys call 0\n"
    "41 fuzz: unknown sys call 0\n"
    "4 fuzz: unknown sys call 64\n"
    "4 fuzz: unknown sys call 4294967307\n"
    "5 fuzz: unknown sys call 4294967307\n"
    "5 fuzz: unknown sys call -1\n"
    "kill 5\n"
    "4 fuzz: unknown sys call -1\n"
    ".\n"
    "4 fuzz: unknown sys call 64\n"
    "4 fuzz: unknown sys call 1000\n"
    "4 fuzz: unknown sys call 64\n"
    "4 fuzz: unknown sys call -1\n"
    "4 fuzz: unknown sys call 26\n"
    "4 fuzz: unknown sys call 0\n"
    "4 fuzz: unknown sys call 4294967307\n"
    "echo .\n"
    ".\n"
    "4 fuzz: unknown sys call 0\n"
    "4 fuzz: unknown sys call -1\n"
    "echo .\n"
    ".\n"
    "4 fuzz: unknown sys call 64\n"
    "4 fuzz: unknown sys call 64\n"
    "4 fuzz: unknown sys call 64\n"
    "217 fuzz: unknown sys call 1000\n"
    "echo .\n"
    ".\n"
    "4 fuzz: unknown sys call 0\n"
    "4 fuzz: unknown sys call 4294967307\n"
    "fuzz: FAIL worker pid 5 exit status -1: killed, and not by fuzz; repro: fuzz --seed"
    " 5 --procs 2 --seconds 6\n"
    "test workers: FAILED (the FAIL lines say why)\n"
    "echo .\n"
    ".\n"
    "test leakcheck: OK\n"
    "fuzz: done seed=5 procs=2 calls=8684 forks=212 kills=110 failures=1 faults_killed=1"
    " leaked_pages=0 leaked_cache=0 swap_slots_used=0->0 swap_outs=0 swap_ins=0"
    " seconds=7\n"
    "SOME TESTS FAILED\n"
    "echo .\n"
    ".\n"
)

# `fuzz --procs 9` (a real run): the usage line, no `fuzz: start`.
USAGE = (
    "usage: fuzz [--seed N] [--procs 1..8] [--ops N | --seconds S] [--hog] [--verbose]\n"
    "SOME TESTS FAILED\n"
)


def nexos(*args: str, env: dict[str, str] | None = None, timeout: float = 60
          ) -> subprocess.CompletedProcess[str]:
    """`nexos ARGS` as this interpreter's `-m nexos`, in the checkout."""
    return subprocess.run([sys.executable, "-m", "nexos", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


# --------------------------------------------------------------------------- the parser

def test_parse_a_clean_run():
    res = parse_fuzz(CLEAN)
    assert (res.seed, res.procs, res.ops, res.seconds) == (3, 4, 300, 0)
    assert (res.lazy, res.cow, res.harts, res.swap_slots) == (1, 1, 2, 0)
    assert res.fails == () and res.leakcheck is True and res.passed
    s = res.summary
    assert s is not None
    assert (s.calls, s.forks, s.kills, s.failures, s.faults_killed) == (1528, 36, 18, 0, 0)
    assert (s.leaked_pages, s.leaked_cache, s.swap_slots_before, s.swap_slots_after) == \
        (0, 0, 0, 0)
    assert res.repro is None


def test_parse_a_failed_run_keeps_its_fail_line_and_repro():
    res = parse_fuzz(KILLED)
    assert (res.seed, res.procs, res.ops, res.seconds) == (5, 2, 0, 6)
    assert len(res.fails) == 1 and "worker pid 5 exit status -1" in res.fails[0]
    assert res.repro == "fuzz --seed 5 --procs 2 --seconds 6"
    assert res.summary is not None and res.summary.failures == 1
    assert res.summary.faults_killed == 1
    assert res.leakcheck is True and not res.passed


def test_parse_refuses_what_is_not_fuzz_output():
    with pytest.raises(ParseError, match="fuzz: start"):
        parse_fuzz(USAGE)


def test_kernel_lines_inside_a_fuzz_line_are_taken_out():
    """A kernel line that landed inside one of fuzz's (both write to the UART) is taken out
    before fuzz's lines are read: here the real clean run with one cut into its summary."""
    done = CLEAN.index("fuzz: done") + 30
    glued = CLEAN[:done] + "6 fuzz: unknown sys call -1\n" + CLEAN[done:]
    assert parse_fuzz(glued) == parse_fuzz(CLEAN)


# --------------------------------------------------------------------------- the records

CFG = BuildConfig(1, 1, cpus=2)


def test_record_of_a_clean_run():
    rec = fuzz_record(CFG, "fuzz --ops 300 --seed 3", 3.0, CLEAN)
    assert not rec.failed and rec.panic is None and not rec.hang and rec.usertraps == 0
    assert rec.repro == "nexos run --lazy 1 --cow 1 --cpus 2 -- 'fuzz --ops 300 --seed 3'"
    j = rec.to_json()
    assert j["problem"] is None and "evidence" not in j
    assert j["summary"]["leaked_pages"] == 0 and j["summary"]["calls"] == 1528


def test_record_of_a_failed_run_names_the_fail_line_and_its_repro():
    rec = fuzz_record(BuildConfig(1, 1, cpus=2, swapsize=256), fuzz_command(5, 2, 6, hog=True),
                      9.0, KILLED)
    assert rec.failed and rec.problem is not None
    assert rec.problem.startswith("FAIL worker pid 5 exit status -1")
    assert rec.repro == ("nexos run --lazy 1 --cow 1 --cpus 2 --swap 256 -- "
                         "'fuzz --seed 5 --procs 2 --seconds 6'")
    assert "SOME TESTS FAILED" in rec.evidence


def test_a_run_cut_short_by_a_hang_or_a_panic_fails_with_the_console_tail():
    """The session's error decides (QemuSession raises them on a timeout and on `panic:`);
    the evidence is what the console showed until then (the first lines of a real run)."""
    cut = CLEAN[:CLEAN.index("test workers")]
    command = fuzz_command(DEFAULT_SEED, DEFAULT_PROCS, 15)
    hang = fuzz_record(CFG, command, 120.0, cut, QemuTimeout("timeout after 112s", cut))
    assert hang.failed and hang.hang and hang.panic is None
    assert hang.problem is not None and hang.problem.startswith("hang: timeout after 112s")
    assert hang.repro.endswith(f"-- '{command}'") and hang.evidence == cut
    panic = fuzz_record(CFG, command, 5.0, cut, KernelPanic("kernel panic: kfree", cut))
    assert panic.failed and panic.panic == "panic: kfree" and not panic.hang
    assert panic.problem == "kernel panic: kfree"
    assert panic.to_json()["summary"] is None


def test_the_hog_goes_with_swap():
    assert fuzz_command(1, 4, 15) == "fuzz --seed 1 --procs 4 --seconds 15"
    assert fuzz_command(1, 4, 15, hog=True).endswith(" --hog")


# --------------------------------------------------------------------------- bad options

@pytest.mark.parametrize("args,code,words", [
    (["--procs", "0"], 2, "--procs"),
    (["--procs", "9"], 2, "--procs"),
    (["--minutes", "0"], 2, "--minutes"),
    (["--minutes", "soon"], 2, "--minutes"),
    (["--seed", "-1"], 2, "--seed"),
    (["--configs", "lazy2-cow1"], 2, "LAZY_ALLOC must be 0 or 1"),
    (["--configs", ","], 2, "names no configuration"),
    (["--swap", "-5"], 2, "--swap"),
    (["--cpus", "0"], 2, "--cpus"),
    (["--jobs", "0"], 2, "--jobs"),
    (["--mem", "16"], 1, "MEMSIZE must be between"),
    (["--bogus"], 2, "No such option"),
])
def test_bad_options_are_one_line(args, code, words):
    r = nexos("fuzz", *args)
    assert r.returncode == code, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("nexos: error: ") and words in r.stderr
    assert "Traceback" not in r.stderr


def test_a_configuration_not_built_is_one_line(tmp_path):
    """--no-build in a checkout without builds: the missing kernel, and the command that
    builds it, in one line (exit 1)."""
    for d in ("kernel", "user"):
        (tmp_path / d).mkdir()
    r = nexos("fuzz", "--no-build", "--configs", "lazy0-cow1",
              env={"NEXOS_REPO": str(tmp_path)})
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "does not exist; build it first: nexos build --lazy 0 --cow 1" in r.stderr


# --------------------------------------------------------------------------- booted for real

README = (ROOT / "README.md").read_text()


def readme_fuzz_line() -> list[str]:
    """The README's `nexos fuzz` line, split as the shell would (its comment dropped)."""
    lines = [x.strip() for x in README.splitlines() if x.strip().startswith("nexos fuzz")]
    assert lines, "the README shows no `nexos fuzz` line"
    return shlex.split(lines[0].split("  #")[0])


# A row of the table: kernel, harts, swap, secs, calls, forks, kills, panics, hangs, leaked
# pages, swap slots, verdict.
ROW_RE = re.compile(r"^\s*(lazy\d-cow\d) +\d+ +0 +\d+ +(\d+) +\d+ +\d+ +0 +0 +0 +\d+->\d+ "
                    r"+clean\s*$", re.M)


@pytest.mark.long
def test_readme_nexos_fuzz_at_its_defaults(build_kernel):
    """The README's `nexos fuzz`, with no option given (each optional one in brackets): all
    four configurations, 15 s each on two harts, as many side by side as the host has
    cores, every one clean with nothing leaked."""
    words = readme_fuzz_line()
    assert words[:2] == ["nexos", "fuzz"], words
    assert all(w.startswith("[") or w.endswith("]") for w in words[2:]), words
    configs = matrix()
    for c in configs:
        build_kernel(c)
    with build_locks(configs):
        r = nexos("fuzz", timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = dict(m.groups() for m in ROW_RE.finditer(r.stdout))
    assert set(rows) == {c.name for c in configs}, r.stdout
    assert all(int(calls) > 0 for calls in rows.values()), r.stdout
    assert (f"guest: fuzz --seed 1 --procs 4 --seconds 15, {fuzz_cpus()} hart(s), swap 0 MiB"
            in r.stdout), r.stdout


HOG_MEMSIZE = SMALL_MEMSIZE  # the swap tests' RAM (tests/kernel/test_swap.py): no build of its own


@pytest.mark.parametrize("lazy,cow", [(1, 1), (0, 0)])
def test_swap_and_the_hog_are_clean(build_kernel, repo, lazy, cow):
    """With a swap disk the guest runs --hog: pages go out and come back while the workers'
    system calls use them, and every page and slot comes back at the end. Each flag's two
    policies: the hog fills its memory before the workers start, so an eager sbrk meets no
    faulting workers (docs/fuzz.md, "Known findings"). In 32 MiB of RAM: the hog is
    filled in a second, and the workers, under the same pressure, make some fifty times
    the calls they make beside the 500 MiB hog of the default RAM."""
    build_kernel(BuildConfig(lazy, cow, HOG_MEMSIZE))
    cfg = BuildConfig(lazy, cow, HOG_MEMSIZE, cpus=2, swapsize=SMALL_SWAPSIZE)
    rec = run_fuzz(cfg, repo, 6, seed=2, procs=4)
    assert not rec.failed, f"{rec.problem}\n{rec.evidence[-2000:]}\nrepro: {rec.repro}"
    assert rec.command == "fuzz --seed 2 --procs 4 --seconds 6 --hog"
    s = rec.result.summary if rec.result else None
    assert s is not None and s.calls > 0 and s.swap_outs > 0, rec.result
    assert (s.leaked_pages, s.leaked_cache, s.failures, s.faults_killed) == (0, 0, 0, 0)
