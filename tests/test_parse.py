"""Parsers and formulas against captured console output (no QEMU needed)."""

import pytest
from rich.console import Console

from nexos.compare import ProbeRequest, ProbeRun, probe_record
from nexos.config import BuildConfig, ConfigError
from nexos.grade import judge_probe_behaviour, judge_probe_numbers, numbers_problems
from nexos.kvcache import KvShape, active_pages_est, expected_verdict, max_kv_pages
from nexos.parse import (
    ParseError,
    find_problems,
    parse_boot_line,
    parse_smolprobe,
    parse_test_verdict,
    parse_value,
)
from nexos.report import compare_table, parallel_table

# The seed document's lazy run, as the console shows it (echo, CRLF, prompt).
SEED_LAZY = (
    "$ smolprobe --prompt-tokens 1,2,3 --gen-len 10\r\n"
    "[smolprobe] loading LLM assets...\r\n"
    "[smolprobe] request prompt_tokens=3 gen_tokens=10\r\n"
    "[smolprobe] kv_capacity max_pages=2880 active_pages_est=180\r\n"
    "[smolprobe] running decode...\r\n"
    "[smolprobe] SUMMARY max_kv_pages=2880 actual_mapped_pages=179 saved_pages=2701 "
    "saved_percent=93%\r\n"
    "[smolprobe] reserve_phase virtual_pages=2880 mapped_pages=0 used_pages=0\r\n"
    "[smolprobe] decode_phase mapped_pages=179 used_pages=185 active_pages_est=180\r\n"
    "[smolprobe] verdict=LAZY_STYLE reserve kept KV pages unmapped; decode allocated on demand\r\n"
    "$ "
)

# The seed's eager run, including its glued `request ...[smolprobe] kv_capacity` line.
SEED_EAGER = """$ smolprobe --prompt-tokens 1,2,3 --gen-len 10
[smolprobe] loading LLM assets...
[smolprobe] request prompt_tokens=3 gen_tokens=10[smolprobe] kv_capacity max_pages=2880 active_pages_est=180
[smolprobe] running decode...
[smolprobe] SUMMARY max_kv_pages=2880 actual_mapped_pages=2880 saved_pages=0 saved_percent=0%
[smolprobe] reserve_phase virtual_pages=2880 mapped_pages=2880 used_pages=2886
[smolprobe] decode_phase mapped_pages=0 used_pages=0 active_pages_est=180
[smolprobe] verdict=EAGER_STYLE reserve mapped most KV pages immediately
"""  # noqa: E501


def test_seed_lazy_run_parses_into_typed_parts():
    r = parse_smolprobe(SEED_LAZY)
    assert r.ok and r.error is None
    assert (r.request.prompt_tokens, r.request.gen_tokens) == (3, 10)
    assert (r.kv_capacity.max_pages, r.kv_capacity.active_pages_est) == (2880, 180)
    assert r.summary.actual_mapped_pages == 179
    assert r.summary.saved_pages == 2701 and r.summary.saved_percent == 93
    assert r.reserve.virtual_pages == 2880 and r.reserve.mapped_pages == 0
    assert r.decode.mapped_pages == 179 and r.decode.used_pages == 185
    assert r.decode.active_pages_est == 180
    assert r.verdict == "LAZY_STYLE"
    assert r.verdict_text.startswith("reserve kept KV pages unmapped")


def test_seed_eager_run_with_glued_line():
    r = parse_smolprobe(SEED_EAGER)
    assert r.request.gen_tokens == 10
    assert r.kv_capacity.max_pages == 2880
    assert r.reserve.mapped_pages == 2880 and r.reserve.used_pages == 2886
    assert r.verdict == "EAGER_STYLE"


def test_trace_tokens_and_parallel_lines():
    text = SEED_LAZY.replace("$ ", "") + "\n".join([
        "[smolprobe] trace step=0 pos=3 kv_mapped_pages=60",
        "[smolprobe] trace step=1 pos=4 kv_mapped_pages=120",
        "[smolprobe] tokens=17,4,99",
        "[smolprobe] fork_phase branches=4 shared_pages_at_fork=2950 prefix_kv_pages=60",
        "[smolprobe] branch 0 tokens=5,6 cow_copies=60 cow_reuses=0 new_kv_pages=60",
        "[smolprobe] branch 1 tokens=7,8 cow_copies=61 cow_reuses=1 new_kv_pages=62 future=x",
        "[smolprobe] PARALLEL_SUMMARY branches=4 eager_copy_pages=11520 actual_copied_pages=240 "
        "saved_pages=11280 saved_percent=97%",
        "[smolprobe] some_future_line alpha=1 beta=2",
    ])
    r = parse_smolprobe(text)
    assert [(t.step, t.pos, t.kv_mapped_pages) for t in r.trace] == [(0, 3, 60), (1, 4, 120)]
    assert r.tokens == (17, 4, 99)
    assert r.fork.branches == 4 and r.fork.prefix_kv_pages == 60
    assert [b.index for b in r.branches] == [0, 1]
    assert r.branches[1].tokens == (7, 8) and r.branches[1].cow_reuses == 1
    assert r.parallel.saved_pages == 11280 and r.parallel.saved_percent == 97
    assert r.records[-1].kind == "some_future_line"
    assert r.records[-1].fields == {"alpha": 1, "beta": 2}


def test_error_run():
    r = parse_smolprobe("[smolprobe] error: prompt+gen (1000003) > seq_len (256)\n$ ")
    assert not r.ok
    assert r.error == "prompt+gen (1000003) > seq_len (256)"


@pytest.mark.parametrize("broken, why", [
    ("SUMMARY max_kv_pages=2880", "SUMMARY max_kv_pages=abc"),
    ("verdict=LAZY_STYLE", "verdict=SORT_OF_LAZY"),
    ("decode_phase mapped_pages=179 used_pages=185", "decode_phase mapped_pages=179"),
])
def test_malformed_line_raises_with_the_line(broken, why):
    bad = SEED_LAZY.replace(broken, why)
    with pytest.raises(ParseError) as e:
        parse_smolprobe(bad)
    assert why.split()[0] in e.value.text


def test_missing_lines_are_named():
    cut = SEED_LAZY.split("[smolprobe] SUMMARY")[0]
    with pytest.raises(ParseError) as e:
        parse_smolprobe(cut)
    msg = str(e.value)
    assert "SUMMARY" in msg and "reserve_phase" in msg and "verdict=" in msg
    assert "request" not in msg.split(":")[0]


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError) as e:
        parse_smolprobe("usertrap: pid 3 smolprobe cause 13 va 0x0\n$ ")
    assert "usertrap" in e.value.text


def test_parse_value():
    assert parse_value("93%") == 93
    assert parse_value("1,2,3") == (1, 2, 3)
    assert parse_value("-4") == -4
    assert parse_value("LAZY_STYLE") == "LAZY_STYLE"


def test_boot_line():
    b = parse_boot_line("\r\nxv6 junk\nnexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=2 mem=256M\nhart 1\n")
    assert (b.lazy, b.cow, b.cpus, b.mem) == (1, 0, 2, 256)
    assert b.line == "nexos: LAZY_ALLOC=1 COW_ALLOC=0 cpus=2 mem=256M"
    with pytest.raises(ParseError):
        parse_boot_line("nexos: LAZY_ALLOC=1 cpus=2\n")


def test_test_verdicts():
    assert parse_test_verdict("test a: OK\nALL TESTS PASSED\n").passed
    v = parse_test_verdict("usertrap: pid 4 cause 15\nSOME TESTS FAILED\n")
    assert not v.passed and v.usertraps == ("usertrap: pid 4 cause 15",)
    v = parse_test_verdict("test x\npanic: kfree\n")
    assert not v.passed and v.panic == "panic: kfree"
    with pytest.raises(ParseError):
        parse_test_verdict("test a: OK\n")


def test_find_problems():
    assert find_problems("ok\nALL TESTS PASSED\n") == []
    assert find_problems("a\r\nusertrap: pid 3 x\r\n") == ["usertrap: pid 3 x"]
    assert find_problems("[smolprobe] error: bad flag --x\n") == ["[smolprobe] error: bad flag --x"]
    assert find_problems("x\nSOME TESTS FAILED\n") == ["SOME TESTS FAILED"]
    # faults a passing test provoked on purpose are not problems; with a failure they are
    assert find_problems("usertrap: pid 5 x\ntest badfault: OK\nALL TESTS PASSED\n") == []
    assert find_problems("usertrap: pid 5 x\nSOME TESTS FAILED\n") == [
        "usertrap: pid 5 x", "SOME TESTS FAILED"]


def test_kv_formulas_default_model():
    shape = KvShape()
    assert shape.kv_dim == 192
    assert max_kv_pages(shape) == 2880
    assert active_pages_est(shape, 3 + 10) == 180
    assert active_pages_est(shape, 0) == 0
    assert active_pages_est(shape, 256) == 2880  # every row touched: the whole reservation


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


def test_probe_request_expected_and_args():
    req = ProbeRequest.from_args(["--prompt-tokens", "1,2,3", "--gen-len=10", "--x"])
    assert req.expected() == (2880, 180)
    assert req.extra == ("--x",)
    assert req.command() == "smolprobe --prompt-tokens 1,2,3 --gen-len 10 --x"
    assert ProbeRequest(seq_len=128).expected() == (1440, 180)


def test_grade_judges_seed_output():
    req = ProbeRequest()
    lazy, eager = BuildConfig(1, 0), BuildConfig(0, 0)
    assert numbers_problems(parse_smolprobe(SEED_LAZY), req) == []
    assert judge_probe_numbers(req)(lazy, SEED_LAZY)[0]
    assert judge_probe_behaviour(req)(lazy, SEED_LAZY)[0]
    assert judge_probe_behaviour(req)(eager, SEED_EAGER)[0]
    ok, msg = judge_probe_behaviour(req)(eager, SEED_LAZY)  # a lazy result on an eager build
    assert not ok and "EAGER_STYLE" in msg
    wrong = SEED_LAZY.replace("saved_pages=2701", "saved_pages=2700")
    ok, msg = judge_probe_numbers(req)(lazy, wrong)
    assert not ok and "saved_pages=2700, expected 2701" in msg


def test_build_config_names_and_validation():
    assert BuildConfig(1, 1).name == "lazy1-cow1"
    assert BuildConfig(0, 1, memsize=256).name == "lazy0-cow1-mem256"
    assert BuildConfig.parse("lazy1-cow0") == BuildConfig(1, 0)
    assert BuildConfig.parse("lazy0-cow1-mem1024").memsize == 1024
    for bad in ("lazy2-cow0", "x", "lazy1"):
        with pytest.raises(ConfigError):
            BuildConfig.parse(bad)
    with pytest.raises(ConfigError):
        BuildConfig(1, 1, memsize=64)


# The --samples lines in the formats of issue 6 (and of smolprobe's COW_ALLOC=0 fork failure).
SAMPLES_COW = SEED_LAZY.replace("$ ", "") + "\n".join([
    "[smolprobe] fork_phase branches=4 shared_pages_at_fork=40210 prefix_kv_pages=60 "
    "parent_mapped_pages=40210 parent_released_kv=1",
    "[smolprobe] branch 0 tokens=9,8,7 cow_copies=63 cow_reuses=0 new_kv_pages=60 fork_pages=0",
    "[smolprobe] branch 1 tokens=1,2,3 cow_copies=63 cow_reuses=0 new_kv_pages=60 fork_pages=0",
    "[smolprobe] branch 2 tokens=4,4,4 cow_copies=63 cow_reuses=0 new_kv_pages=60 fork_pages=0",
    "[smolprobe] branch 3 tokens=5,6,7 cow_copies=3 cow_reuses=60 new_kv_pages=60 fork_pages=0",
    "[smolprobe] branches_phase parent_copies=2",
    "[smolprobe] PARALLEL_SUMMARY branches=4 eager_copy_pages=160840 actual_copied_pages=432 "
    "saved_pages=160408 saved_percent=99%",
    "[smolprobe] verdict=COW_STYLE branches share the prompt KV until they write",
])

SAMPLES_OOM = SEED_LAZY.replace("$ ", "") + "\n".join([
    "[smolprobe] fork_phase branches=4 shared_pages_at_fork=40210 prefix_kv_pages=60",
    "[smolprobe] branch 0 tokens=9,8,7 cow_copies=0 cow_reuses=0 new_kv_pages=60 "
    "fork_pages=40210",
    "[smolprobe] fork of branch 1 failed: out of memory (COW_ALLOC=0 copies every page)",
    "[smolprobe] PARALLEL_SUMMARY branches=1 eager_copy_pages=40210 actual_copied_pages=40270 "
    "saved_pages=-60 saved_percent=0%",
    "[smolprobe] verdict=EAGER_FORK_STYLE the kernel copied every page at fork",
])


def test_samples_run_parses_both_verdicts_and_extra_fields():
    r = parse_smolprobe(SAMPLES_COW)
    assert r.verdict == "LAZY_STYLE" and r.parallel_verdict == "COW_STYLE"
    assert r.parallel_verdict_text.startswith("branches share")
    assert r.fork.branches == 4 and r.fork.shared_pages_at_fork == 40210
    assert [b.cow_copies for b in r.branches] == [63, 63, 63, 3]
    assert r.branches[3].cow_reuses == 60 and r.branches[3].fields == {"fork_pages": 0}
    assert r.branches[0].tokens == (9, 8, 7)
    assert r.parallel.saved_pages == 160408 and r.fork_failures == []
    assert any(rec.kind == "branches_phase" for rec in r.records)
    rec = probe_record(ProbeRun(BuildConfig(1, 1), "smolprobe", r), ProbeRequest(samples=4))
    par = rec["parallel"]
    assert (par["branches"], par["forked"]) == (4, 4)
    assert (par["cow_copies"], par["cow_reuses"], par["new_kv_pages"]) == (192, 60, 240)
    assert par["verdict"] == "COW_STYLE"
    assert par["branch_lines"][3]["fork_pages"] == 0


def test_samples_fork_failure_is_a_result_not_an_error():
    r = parse_smolprobe(SAMPLES_OOM)
    assert r.ok and r.parallel_verdict == "EAGER_FORK_STYLE"
    assert r.fork_failures == [
        "fork of branch 1 failed: out of memory (COW_ALLOC=0 copies every page)"]
    assert len(r.branches) == 1 and r.parallel.branches == 1 and r.parallel.saved_pages == -60
    rec = probe_record(ProbeRun(BuildConfig(1, 0), "smolprobe", r), ProbeRequest(samples=4))
    assert (rec["parallel"]["branches"], rec["parallel"]["forked"]) == (4, 1)
    # the same failure printed as an error line still counts as a fork failure
    r = parse_smolprobe(SAMPLES_OOM.replace("[smolprobe] fork of", "[smolprobe] error: fork of"))
    assert r.error is None and r.fork_failures[0].startswith("error: fork of branch 1")
    assert not find_problems(SAMPLES_OOM)


def test_parallel_table_fits_100_columns():
    cow = probe_record(ProbeRun(BuildConfig(1, 1), "smolprobe", parse_smolprobe(SAMPLES_COW)),
                       ProbeRequest(samples=4))
    oom = probe_record(ProbeRun(BuildConfig(1, 0), "smolprobe", parse_smolprobe(SAMPLES_OOM)),
                       ProbeRequest(samples=4))
    console = Console(width=100, record=True, color_system=None)
    console.print(compare_table([oom, cow], "smolprobe --samples 4"))
    console.print(parallel_table([oom, cow]))
    text = console.export_text()
    assert "…" not in text  # nothing cut
    assert "EAGER_FORK_STYLE" in text and "COW_STYLE" in text and "1/4" in text
    assert "160408 (99%)" in text and "fork of branch 1 failed" in text
    assert parallel_table([{**cow, "parallel": None}]) is None


def test_find_problems_shell_complaints():
    assert find_problems("exec nosuch failed\n") == ["exec nosuch failed"]
    assert find_problems("sh: cannot open in.txt\n") == ["sh: cannot open in.txt"]
    assert find_problems("hello\nexecutable failed\n") == []


def test_compare_table_fits_80_columns():
    """The main demo's table must read whole in a plain 80-column terminal (and in CI logs,
    where rich assumes 80 columns)."""
    runs = [probe_record(ProbeRun(BuildConfig(lazy, 0), "smolprobe", parse_smolprobe(text)),
                         ProbeRequest())
            for lazy, text in ((0, SEED_EAGER), (1, SEED_LAZY))]
    console = Console(width=80, record=True, color_system=None)
    console.print(compare_table(runs, "smolprobe --prompt-tokens 1,2,3 --gen-len 10"))
    text = console.export_text()
    assert "…" not in text
    assert "2701 (93%)" in text and "2880/2886" in text and "EAGER_STYLE" in text
