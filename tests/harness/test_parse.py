"""The console parsers (harness/nexos/parse/) on real output: the transcripts of
tests/transcripts/ (made by scripts/transcripts.py). A broken input is a real transcript
edited on purpose (a line dropped, moved or corrupted); no program output is typed here.
The parser on every transcript, against the geometry, is tests/llm/test_transcripts.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig, ConfigError
from nexos.parse import (
    PREFIX,
    ForkFailure,
    KilledBranch,
    ParseError,
    SmolprobeResult,
    find_panic,
    find_problems,
    find_usertraps,
    parse_boot_line,
    parse_serve,
    parse_smolprobe,
    parse_test_verdict,
    parse_value,
    split_records,
)
from nexos.programs.kvcache import KvShape, active_pages_est, expected_verdict, max_kv_pages

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts"


def body(name: str) -> str:
    """A transcript without its `# ` header line (tests/transcripts/README.md)."""
    header, _, rest = (TRANSCRIPTS / f"{name}.txt").read_text().partition("\n")
    assert header.startswith("# "), name
    return rest


def line(text: str, kind: str) -> str:
    """The first `[smolprobe] <kind>...` line of `text`."""
    return next(ln for ln in text.splitlines() if ln.startswith(PREFIX + kind))


def pairs(ln: str) -> dict[str, str]:
    """The key=value words of one line, as printed."""
    return dict(w.split("=", 1) for w in ln.split() if "=" in w)


def without(text: str, kind: str) -> str:
    """`text` with its `[smolprobe] <kind>` lines dropped."""
    return "".join(ln for ln in text.splitlines(keepends=True)
                   if not ln.startswith(PREFIX + kind))


SEED_LAZY = body("guest-seed-lazy1-cow0")
SEED_EAGER = body("guest-seed-lazy0-cow0")
SAMPLES_COW = body("guest-samples4-lazy1-cow1")
SAMPLES_OOM = body("guest-samples6-oom-lazy0-cow0")


# --------------------------------------------------------------------------- single runs

def test_seed_lazy_run_parses_into_typed_parts():
    r = parse_smolprobe(SEED_LAZY)
    assert r.ok and r.error is None and r.mode == "single"
    req, cap = pairs(line(SEED_LAZY, "request")), pairs(line(SEED_LAZY, "kv_capacity"))
    assert (r.request.prompt_tokens, r.request.gen_tokens) == (
        int(req["prompt_tokens"]), int(req["gen_tokens"]))
    assert (r.kv_capacity.max_pages, r.kv_capacity.active_pages_est) == (
        int(cap["max_pages"]), int(cap["active_pages_est"]))
    summ = pairs(line(SEED_LAZY, "SUMMARY"))
    assert r.summary.actual_mapped_pages == int(summ["actual_mapped_pages"])
    assert r.summary.saved_percent == int(summ["saved_percent"].rstrip("%"))
    dec = pairs(line(SEED_LAZY, "decode_phase"))
    assert (r.decode.mapped_pages, r.decode.used_pages, r.decode.active_pages_est) == (
        int(dec["mapped_pages"]), int(dec["used_pages"]), int(dec["active_pages_est"]))
    assert r.reserve.virtual_pages == r.summary.max_kv_pages
    assert r.verdict == "LAZY_STYLE" and r.verdict_text.startswith("reserve kept")
    tim = pairs(line(SEED_LAZY, "timing"))
    assert r.timing.load_ms == int(tim["load_ms"])
    assert r.timing.tokens_per_s == float(tim["tokens_per_s"])
    assert r.prefill is None and r.fork is None and r.branches == [] and r.killed == []
    assert r.tokens is None and r.trace == [] and r.bench is None


def test_seed_eager_run():
    r = parse_smolprobe(SEED_EAGER)
    assert r.mode == "single" and r.verdict == "EAGER_STYLE"
    assert r.reserve.mapped_pages == r.summary.max_kv_pages == r.kv_capacity.max_pages


def test_console_echo_crlf_and_glued_lines():
    """As the guest console shows a run: CRLF, the echoed command, the prompt, and two records
    on one line (the kernel's and smolprobe's output interleave)."""
    glued = SEED_EAGER.replace("\n" + PREFIX + "kv_capacity", PREFIX + "kv_capacity", 1)
    assert len(glued.splitlines()) == len(SEED_EAGER.splitlines()) - 1
    console = ("$ smolprobe --prompt-tokens 1,2,3 --gen-len 10\n" + glued + "$ ").replace(
        "\n", "\r\n")
    assert split_records(console, PREFIX) == split_records(SEED_EAGER, PREFIX)
    assert parse_smolprobe(console) == parse_smolprobe(SEED_EAGER)


@pytest.mark.parametrize("kill", [
    "usertrap: pid 5 (smolprobe) killed: scause 0x000000000000000f sepc 0x0000000000000f78 "
    "stval 0x000000001fa2a000\n",
    "usertrap: pid 4 (smolserve) killed: out of memory, the largest (pid 5 faulted)\n",
    "usertrap: pid 5 (smolprobe) killed: out of memory in a system call "
    "(va 0x000000001fa2a000)\n",
])
def test_kernel_kill_line_inside_a_record_is_taken_out(kill):
    """Each of the kernel's kill lines (kernel/trap.c, kernel/oom.c) can land inside a
    program's line on the console; the record around it reads as if it had not."""
    at = SEED_EAGER.index(PREFIX + "kv_capacity") + len(PREFIX) + 3
    console = SEED_EAGER[:at] + kill + SEED_EAGER[at:]
    assert split_records(console, PREFIX) == split_records(SEED_EAGER, PREFIX)


def test_trace_tokens_logits_and_bench_lines():
    text = body("host-trace")
    r = parse_smolprobe(text)
    assert [t.kv_mapped_pages for t in r.trace] == [
        int(pairs(ln)["kv_mapped_pages"]) for ln in text.splitlines() if "trace step=" in ln]
    text = body("host-print")
    r = parse_smolprobe(text)
    assert r.tokens == tuple(int(x) for x in line(text, "tokens=").split("=")[1].split(","))
    assert r.logits is not None and r.logits[0] == float(
        line(text, "logits=").split("=")[1].split(",")[0])
    text = body("host-single-bench")
    r = parse_smolprobe(text)
    assert r.mode == "single" and r.bench.ratio == int(pairs(line(text, "bench "))["ratio"][:-1])
    assert r.bench_detail.rounds == int(pairs(line(text, "bench_detail"))["rounds"])
    r = parse_smolprobe(body("host-bench"))
    assert r.mode == "bench" and r.request is None and r.bench and r.bench_detail


def test_nonfinite_logits_parse():
    text = body("host-print")
    old = line(text, "logits=")
    values = old.split("=")[1].split(",")
    new = old.split("=")[0] + "=" + ",".join(["nan", "-inf", "inf", *values[3:]])
    r = parse_smolprobe(text.replace(old, new))
    assert r.logits is not None and r.logits[0] != r.logits[0]  # nan
    assert r.logits[1:3] == (float("-inf"), float("inf"))


# --------------------------------------------------------------------------- --samples runs

def test_samples_run_parses_both_phases_and_every_branch():
    r = parse_smolprobe(SAMPLES_COW)
    assert r.mode == "samples" and r.ok and r.verdict is None
    assert r.parallel_verdict == "COW_STYLE"
    assert r.parallel_verdict_text.startswith("branches share")
    fork = pairs(line(SAMPLES_COW, "fork_phase"))
    assert r.fork.branches == int(fork["branches"]) == r.parallel_request.samples
    assert r.fork.parent_released_kv == int(fork["parent_released_kv"])
    assert r.prefill.positions == r.request.prompt_tokens
    branch_lines = [ln for ln in SAMPLES_COW.splitlines() if ln.startswith(PREFIX + "branch ")]
    assert [b.index for b in r.branches] == [int(ln.split()[2]) for ln in branch_lines]
    for b, ln in zip(r.branches, branch_lines, strict=True):
        kv = pairs(ln)
        assert b.tokens == tuple(int(t) for t in kv["tokens"].split(","))
        assert (b.cow_copies, b.kv_reuses, b.decode_ms) == (
            int(kv["cow_copies"]), int(kv["kv_reuses"]), int(kv["decode_ms"]))
        assert b.fields["fork_pages"] == b.fork_pages
    assert r.parallel.saved_pages == int(pairs(line(SAMPLES_COW, "PARALLEL_SUMMARY"))[
        "saved_pages"])
    assert r.branches_phase.parent_copies == int(pairs(line(SAMPLES_COW, "branches_phase"))[
        "parent_copies"])
    assert r.fork_failed == [] and r.killed == []


def test_fork_failure_is_a_result_not_an_error():
    r = parse_smolprobe(SAMPLES_OOM)
    own = line(SAMPLES_OOM, "fork of branch")[len(PREFIX):]
    assert r.ok and r.mode == "samples" and r.parallel_verdict == "EAGER_FORK_STYLE"
    assert r.fork_failed == [ForkFailure(r.fork.branches, own.split(": ", 1)[1], own)]
    assert len(r.branches) == r.parallel.branches == r.fork.branches < r.fork.requested
    assert not hasattr(r, "fork_failures")
    assert find_problems(SAMPLES_OOM) == []


def test_killed_branch_keeps_its_place():
    text = body("host-samples3-killed")
    r = parse_smolprobe(text)
    own = next(ln for ln in text.splitlines() if " killed before reporting" in ln)
    index = int(own.split()[2])
    assert r.killed == [KilledBranch(index, -1, own[len(PREFIX):])]
    assert index not in [b.index for b in r.branches]
    assert len(r.branches) + 1 == r.fork.branches and r.parallel.branches == len(r.branches)


def test_killed_branch_before_fork_phase_is_out_of_order():
    """The order smolprobe used to print a killed branch in: before the phases."""
    text = body("host-samples3-killed")
    killed = next(ln for ln in text.splitlines(keepends=True) if " killed " in ln)
    moved = text.replace(killed, "").replace(PREFIX + "reserve_phase",
                                             killed + PREFIX + "reserve_phase")
    with pytest.raises(ParseError) as e:
        parse_smolprobe(moved)
    assert "samples run: missing the `reserve_phase` line before the `branch_killed` line" in (
        str(e.value))


# --------------------------------------------------------------------------- error runs

@pytest.mark.parametrize("name", ["guest-error-lazy1-cow1", "host-error-seq-len",
                                  "host-error-flag", "host-error-no-branch"])
def test_error_runs(name):
    text = body(name)
    r = parse_smolprobe(text)
    assert r.mode == "error" and not r.ok
    assert r.error == text.strip().splitlines()[-1].split("error: ", 1)[1]
    assert find_problems(text) == [text.strip().splitlines()[-1]]


def test_an_error_naming_a_fork_is_still_an_error():
    r = parse_smolprobe(body("host-error-no-branch"))
    assert "fork" in r.error and not r.ok and r.mode == "error"
    assert r.parallel.branches == 0 and [k.index for k in r.killed] == [0]
    assert r.fork_failed == []


def test_lines_after_an_error_are_a_parse_error():
    text = body("host-error-seq-len")
    with pytest.raises(ParseError, match="after the `error:` line"):
        parse_smolprobe(text + line(SEED_LAZY, "request") + "\n")


# --------------------------------------------------------------------------- broken inputs

@pytest.mark.parametrize("old, new, why, kind", [
    ("max_kv_pages=2880", "max_kv_pages=abc", "is not an integer", "SUMMARY"),
    ("verdict=LAZY_STYLE", "verdict=SORT_OF_LAZY", "verdict must be one of", "verdict"),
    (" active_pages_est=180\n[smolprobe] verdict", "\n[smolprobe] verdict", "must have the keys",
     "decode_phase"),
    ("used_pages=0\n", "used_pages=0 extra=1\n", "must have the keys", "reserve_phase"),
    ("saved_percent=93%", "saved_percent=93", "is not an integer percentage", "SUMMARY"),
    ("[smolprobe] decode_phase", "[smolprobe] decoding_phase", "unknown smolprobe line kind",
     "decoding_phase"),
])
def test_corrupted_line_is_a_parse_error_naming_it(old, new, why, kind):
    assert old in SEED_LAZY
    bad = SEED_LAZY.replace(old, new, 1)
    with pytest.raises(ParseError) as e:
        parse_smolprobe(bad)
    assert why in str(e.value)
    assert e.value.text.startswith(PREFIX + kind)  # the offending line itself


@pytest.mark.parametrize("kind", ["SUMMARY", "reserve_phase", "decode_phase", "verdict=",
                                  "timing", "running", "kv_capacity"])
def test_missing_single_line_is_named(kind):
    with pytest.raises(ParseError) as e:
        parse_smolprobe(without(SEED_LAZY, kind))
    assert f"single run: missing the `{kind.rstrip('=')}` line" in str(e.value)


@pytest.mark.parametrize("kind", ["prefill_phase", "fork_phase", "PARALLEL_SUMMARY",
                                  "branches_phase", "fork of branch"])
def test_missing_samples_line_is_named(kind):
    cut = without(SAMPLES_OOM, kind)
    with pytest.raises(ParseError) as e:
        parse_smolprobe(cut)
    if kind == "fork of branch":
        assert "no `fork of branch k failed` line" in str(e.value)
    else:
        assert f"samples run: missing the `{kind}` line" in str(e.value)


def test_branch_lines_must_be_in_index_order():
    lines = SAMPLES_COW.splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if ln.startswith(PREFIX + "branch ")]
    lines[at[0]], lines[at[1]] = lines[at[1]], lines[at[0]]
    with pytest.raises(ParseError, match="branch lines out of order"):
        parse_smolprobe("".join(lines))


def test_cut_short_run_needs_require_complete_false():
    cut = SEED_LAZY.split(PREFIX + "SUMMARY")[0]
    with pytest.raises(ParseError, match="missing the `SUMMARY` line"):
        parse_smolprobe(cut)
    r = parse_smolprobe(cut, require_complete=False)
    assert r.mode == "single" and r.summary is None and r.kv_capacity is not None
    moved = cut.replace(line(cut, "request") + "\n", "") + line(cut, "request") + "\n"
    with pytest.raises(ParseError, match="missing the `request` line before the `kv_capacity`"):
        parse_smolprobe(moved, require_complete=False)


def test_no_smolprobe_lines_is_a_parse_error():
    other = body("console-lazytests-lazy1-cow1")
    with pytest.raises(ParseError, match="no \\[smolprobe\\] lines") as e:
        parse_smolprobe(other)
    assert "usertrap" in e.value.text


def test_parse_value():
    ln = line(SEED_LAZY, "SUMMARY")
    values = {k: parse_value(v) for k, v in pairs(ln).items()}
    assert values["saved_percent"] == int(pairs(ln)["saved_percent"][:-1])
    assert all(isinstance(v, int) for v in values.values())
    tokens = pairs(line(SAMPLES_COW, "branch 0"))["tokens"]
    assert parse_value(tokens) == tuple(int(t) for t in tokens.split(","))
    assert parse_value(pairs(line(SEED_LAZY, "timing"))["tokens_per_s"]) == float(
        pairs(line(SEED_LAZY, "timing"))["tokens_per_s"])
    assert parse_value("LAZY_STYLE") == "LAZY_STYLE"


# --------------------------------------------------------------------------- the console

def boot_text() -> str:
    return body("console-boot-lazy1-cow1")


def test_boot_line():
    text = boot_text()
    own = next(ln for ln in text.splitlines() if ln.startswith("nexos: "))
    b = parse_boot_line(text)
    assert (b.lazy, b.cow) == (1, 1) and b.line == own
    assert f"cpus={b.cpus}" in own and f"mem={b.mem}M" in own
    with pytest.raises(ParseError):
        parse_boot_line(text.replace(" COW_ALLOC=1", ""))


def test_test_verdicts():
    text = body("console-lazytests-lazy1-cow1")
    v = parse_test_verdict(text)
    assert v.passed and v.line == "ALL TESTS PASSED" and v.panic is None
    assert v.usertraps == find_usertraps(text) and len(v.usertraps) == text.count("usertrap:")
    failed = text.replace("ALL TESTS PASSED", "SOME TESTS FAILED")
    assert not parse_test_verdict(failed).passed
    with pytest.raises(ParseError):
        parse_test_verdict(text.replace("ALL TESTS PASSED", ""))


def test_a_panic_means_failed():
    text = body("console-cowtests-lazy1-cow1")
    trap = find_usertraps(text)[0]
    panicked = text.replace(trap, "panic: " + trap.split(": ", 1)[1])
    v = parse_test_verdict(panicked)
    assert not v.passed and v.panic == find_panic(panicked) == "panic: " + trap.split(": ", 1)[1]


def test_find_problems():
    lazy = body("console-lazytests-lazy1-cow1")
    assert find_problems(lazy) == []  # faults a passing test provokes on purpose
    failed = lazy.replace("ALL TESTS PASSED", "SOME TESTS FAILED")
    assert find_problems(failed) == [*find_usertraps(lazy), "SOME TESTS FAILED"]
    shell = body("console-no-such-program-lazy1-cow1")
    assert find_problems(shell) == [shell.strip()]
    assert find_problems(shell.replace("exec ", "executable ")) == []
    assert find_problems(SEED_LAZY) == []


# --------------------------------------------------------------------------- smolserve lines
#
# smolserve's lines go through the same machinery as smolprobe's (nexos.parse.core), held
# to its own schema (docs/smolserve.md, "Output"), with the same error type.

SERVE_PREFIX = "[smolserve] "
SERVE_QUEUE = body("serve-queue-lazy0-cow0")
SERVE_OOM = body("serve-oom-lazy1-cow1")


def serve_line(text: str, kind: str) -> str:
    """The first `[smolserve] <kind>...` line of `text`."""
    return next(ln for ln in text.splitlines() if ln.startswith(SERVE_PREFIX + kind))


# (a pattern in the transcript, its replacement (re.sub), the message, the line kind): the
# patterns match whatever figures the transcript holds
@pytest.mark.parametrize("old, new, why, kind", [
    (r"\[smolserve\] memory", "[smolserve] memoir",
     'unknown smolserve line kind `memoir` (docs/smolserve.md, "Output")', "memoir"),
    (r" recomputed=0", "", "`SERVE_SUMMARY` line must have the keys requests completed "
     "peak_concurrent queued recomputed reserved_kv_pages", "SERVE_SUMMARY"),
    (r"(\[smolserve\] admit .* pagecache_pages=\d+)\n", r"\1 extra=1\n",
     "`admit` line must have the keys", "admit"),
    (r"peak_concurrent=", "peak=", "has requests completed peak queued", "SERVE_SUMMARY"),
    (r"waste_percent=(\d+)%", r"waste_percent=\1",
     "`SERVE_SUMMARY` line: waste_percent='", "SERVE_SUMMARY"),
    (r"tokens_per_s=(\d+\.\d)\b", r"tokens_per_s=\g<1>5", "is not a number with one decimal",
     "SERVE_SUMMARY"),
    (r"total_pages=\d+", "total_pages=lots", "total_pages='lots' is not an integer", "start"),
    (r"reason=watermark", "reason=tired", "reason must be one of watermark, reaping", "queue"),
])
def test_broken_smolserve_line_is_a_parse_error_naming_it(old, new, why, kind):
    """An unknown kind, a missing or extra key, a value of another type: the same ParseError
    as smolprobe's, its message naming the line kind and what is wrong, its text the line."""
    broken, n = re.subn(old, new, SERVE_QUEUE, count=1)
    assert n == 1, old
    with pytest.raises(ParseError) as e:
        parse_serve(broken)
    assert why in str(e.value)
    assert e.value.text.startswith(SERVE_PREFIX + kind)


def test_smolserve_recompute_line_needs_its_trailer():
    ln = serve_line(SERVE_OOM, "recompute")
    with pytest.raises(ParseError, match="`recompute` line must end with"):
        parse_serve(SERVE_OOM.replace(ln, ln.split(" (killed")[0], 1))


@pytest.mark.parametrize("kind, why", [
    ("memory", "serve run: missing the `memory` line (the output ends)"),
    ("start", "serve run: missing the `start` line before the `admit` line"),
    ("request", "serve run: missing the `request` line before the `SERVE_SUMMARY` line"),
])
def test_missing_smolserve_line_is_named(kind, why):
    cut = "".join(ln for ln in SERVE_QUEUE.splitlines(keepends=True)
                  if not ln.startswith(SERVE_PREFIX + kind))
    with pytest.raises(ParseError) as e:
        parse_serve(cut)
    assert why in str(e.value) and 'docs/smolserve.md, "Output"' in str(e.value)


def test_smolserve_lines_out_of_order_or_after_an_error():
    summary = serve_line(SERVE_QUEUE, "SERVE_SUMMARY") + "\n"
    second = SERVE_PREFIX + "request id=R1 "
    moved = SERVE_QUEUE.replace(summary, "").replace(second, summary + second, 1)
    with pytest.raises(ParseError,
                       match="missing the `PREFIX_SUMMARY` line before the `request` line"):
        parse_serve(moved)
    memory = serve_line(SERVE_QUEUE, "memory") + "\n"
    with pytest.raises(ParseError, match="unexpected `memory` line after `memory`"):
        parse_serve(SERVE_QUEUE + memory)
    error = body("serve-error-max-len-lazy1-cow1")
    with pytest.raises(ParseError, match="lines after the `error:` line"):
        parse_serve(error + serve_line(SERVE_QUEUE, "memory") + "\n")


def test_a_kernel_line_inside_a_program_line_is_taken_out():
    """The console may put the kernel's `usertrap:` line in the middle of a program's line
    (both write to the UART): the line reads as if it were not there, for either program."""
    trap = find_usertraps(SERVE_OOM)[0] + "\n"
    ln = serve_line(SERVE_OOM, "recompute")
    glued = SERVE_OOM.replace(trap, "", 1).replace(ln, ln[:30] + trap + ln[30:], 1)
    assert parse_serve(glued).events == parse_serve(SERVE_OOM).events
    ln = line(SEED_LAZY, "SUMMARY")
    glued = SEED_LAZY.replace(ln, ln[:25] + trap + ln[25:], 1)
    assert parse_smolprobe(glued) == parse_smolprobe(SEED_LAZY)


# --------------------------------------------------------------------------- formulas

def test_kv_formulas_match_the_seed_run():
    r: SmolprobeResult = parse_smolprobe(SEED_LAZY)
    shape = KvShape()
    assert shape.kv_dim == 192
    assert max_kv_pages(shape) == r.kv_capacity.max_pages
    assert active_pages_est(shape, r.request.prompt_tokens + r.request.gen_tokens) == (
        r.kv_capacity.active_pages_est)
    assert active_pages_est(shape, 0) == 0
    assert active_pages_est(shape, shape.seq_len) == max_kv_pages(shape)  # every row touched
    assert expected_verdict(r.reserve.mapped_pages, r.summary.max_kv_pages) == r.verdict
    eager = parse_smolprobe(SEED_EAGER)
    assert expected_verdict(eager.reserve.mapped_pages, eager.summary.max_kv_pages) == (
        eager.verdict)


def test_active_pages_with_unaligned_regions():
    # seq_len=10: a region is 7680 bytes, so regions start mid-page; 1 row of region 1 sits
    # at bytes 7680..8447, which spans pages 1 and 2.
    shape = KvShape(n_layers=1, n_kv_heads=3, head_dim=64, seq_len=10)
    assert max_kv_pages(shape) == 4  # 15360 bytes
    assert active_pages_est(shape, 1) == 1 + 2


def test_expected_verdict_thresholds():
    assert expected_verdict(28, 2880) == "LAZY_STYLE"
    assert expected_verdict(29, 2880) == "MIXED"
    assert expected_verdict(2592, 2880) == "EAGER_STYLE"


def test_build_config_names_and_validation():
    assert BuildConfig(1, 1).name == "lazy1-cow1"
    assert BuildConfig(0, 1, memsize=256).name == "lazy0-cow1-mem256"
    assert BuildConfig(0, 1, memsize=256, cpus=2).folder == "lazy0-cow1"  # one build, any boot
    assert BuildConfig.parse("lazy1-cow0") == BuildConfig(1, 0)
    assert BuildConfig.parse("lazy0-cow1-mem1024").memsize == 1024
    for bad in ("lazy2-cow0", "x", "lazy1"):
        with pytest.raises(ConfigError):
            BuildConfig.parse(bad)
    with pytest.raises(ConfigError):
        BuildConfig(1, 1, memsize=16)


def test_the_transcripts_used_here_exist():
    """Every transcript name used here exists (a rename of a transcript must update this)."""
    for name in ("guest-seed-lazy1-cow0", "guest-seed-lazy0-cow0", "guest-samples4-lazy1-cow1",
                 "guest-samples6-oom-lazy0-cow0", "console-boot-lazy1-cow1",
                 "serve-queue-lazy0-cow0", "serve-oom-lazy1-cow1",
                 "serve-error-max-len-lazy1-cow1"):
        assert (TRANSCRIPTS / f"{name}.txt").is_file()
    assert re.search(r"^nexos: ", boot_text(), re.M)
