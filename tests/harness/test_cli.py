"""The command line: help, option parsing, one-line errors, exit codes (no QEMU needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

import nexos.course.cli as course_cli
import nexos.machine.cli as machine_cli
from nexos.cli import cli
from nexos.machine.config import LLM_CPUS, BuildConfig

COMMANDS = ["build", "run", "probe", "compare", "grade", "plot", "model"]


@pytest.fixture
def runner(repo, monkeypatch):
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    return CliRunner()


def one_line_error(result) -> str:
    """The single stderr line of a failed command (asserts there is exactly one)."""
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("nexos: error: ")
    return lines[0]


def test_top_help_lists_commands(runner):
    r = runner.invoke(cli, ["--help"])
    assert r.exit_code == 0
    for c in COMMANDS:
        assert c in r.output


@pytest.mark.parametrize("cmd, opts", [
    ("build", ["--lazy", "--cow", "--all", "--llm"]),
    ("run", ["--lazy", "--cow", "--llm", "--timeout", "--cpus"]),
    ("probe", ["--lazy", "--cow", "--json"]),
    ("compare", ["--json", "--matrix", "--samples", "--prompt-tokens", "--gen-len", "--seq-len"]),
    ("grade", ["--json", "--junit", "--configs"]),
    ("plot", ["--out", "--seq-lens"]),
])
def test_command_help(runner, cmd, opts):
    r = runner.invoke(cli, [cmd, "--help"])
    assert r.exit_code == 0, r.output
    for o in opts:
        assert o in r.output


@pytest.mark.parametrize("args, needle", [
    (["build", "--lazy", "2"], "--lazy"),
    (["build", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
    (["run"], "COMMANDS"),
    (["run", "--cpus", "99", "--", "echo"], "--cpus"),
    (["compare", "--prompt-tokens", "1,x"], "--prompt-tokens"),
    (["grade", "--checks", "usertests,nosuch"], "nosuch"),
    (["grade", "--configs", "lazy7-cow0", "--no-build"], "'lazy7-cow0'"),
    (["probe", "--no-build", "--gen-len", "abc"], "abc"),
])
def test_user_mistakes_are_one_line(runner, args, needle):
    r = runner.invoke(cli, args)
    assert needle in one_line_error(r)


def test_unbuilt_configuration_is_one_line(runner, tmp_path):
    """In a checkout with nothing built, a boot names the missing file and the command
    that builds it (for every RAM size: one build boots them all)."""
    for d in ("kernel", "user"):
        (tmp_path / d).mkdir()
    r = runner.invoke(cli, ["run", "--no-build", "--mem", "2048", "--", "echo hi"],
                      env={"NEXOS_REPO": str(tmp_path)})
    line = one_line_error(r)
    assert "build/lazy1-cow1/kernel does not exist" in line, line
    assert "nexos build --lazy 1 --cow 1" in line, line


def only_on_path(tmp_path, *tools: str) -> str:
    """A PATH with nothing but `tools` (symlinks to the real ones)."""
    d = tmp_path / "bin"
    d.mkdir()
    for t in tools:
        real = shutil.which(t)
        if real:
            (d / t).symlink_to(real)
    return str(d)


def test_missing_toolchain_names_the_packages(runner, monkeypatch, tmp_path):
    monkeypatch.delenv("NEXOS_QEMU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    r = runner.invoke(cli, ["build", "--lazy", "1", "--cow", "1"])
    line = one_line_error(r)  # building needs the compiler only
    assert "riscv64-unknown-elf-gcc" in line and "gcc-riscv64-unknown-elf" in line
    assert "qemu" not in line
    assert r.exit_code == 1
    r = runner.invoke(cli, ["run", "--", "echo hi"])  # booting needs both: both named at once
    line = one_line_error(r)
    assert "gcc-riscv64-unknown-elf" in line and "qemu-system-misc" in line


def test_missing_qemu_only(runner, monkeypatch, tmp_path):
    monkeypatch.delenv("NEXOS_QEMU", raising=False)
    monkeypatch.setenv("PATH", only_on_path(tmp_path, "make", "timeout",
                                            "riscv64-unknown-elf-gcc"))
    for args in (["run", "--no-build", "--", "echo hi"], ["compare", "--no-build"],
                 ["grade", "--no-build"], ["probe", "--no-build"], ["plot", "--no-build"]):
        line = one_line_error(runner.invoke(cli, args))
        assert "qemu-system-riscv64" in line and "qemu-system-misc" in line, args
        assert "gcc" not in line


def test_missing_image_names_the_build_command(runner, tmp_path):
    fake = tmp_path / "checkout"
    for sub in ("kernel", "user", "build/lazy0-cow1"):
        (fake / sub).mkdir(parents=True)
    (fake / "build/lazy0-cow1/kernel").write_bytes(b"\0")
    r = CliRunner().invoke(cli, ["run", "--no-build", "--lazy", "0", "--cow", "1", "--llm",
                                 "--", "echo"], env={"NEXOS_REPO": str(fake)})
    line = one_line_error(r)
    assert "fs-llm.img does not exist" in line and "nexos build --lazy 0 --cow 1 --llm" in line


def test_compiler_errors_are_shown_verbatim(monkeypatch, tmp_path):
    """A failed build prints the compiler's own error lines (a tiny checkout whose Makefile
    compiles a broken file with the real cross compiler)."""
    if shutil.which("riscv64-unknown-elf-gcc") is None:
        pytest.fail("riscv64-unknown-elf-gcc is not installed", pytrace=False)
    fake = tmp_path / "checkout"
    (fake / "kernel").mkdir(parents=True)
    (fake / "user").mkdir()
    (fake / "kernel/broken.c").write_text("int f(void) { return undeclared_name; }\n")
    (fake / "Makefile").write_text(
        "all:\n\triscv64-unknown-elf-gcc -Wall -Werror -c -o /dev/null kernel/broken.c\n")
    monkeypatch.setenv("NEXOS_REPO", str(fake))
    r = CliRunner().invoke(cli, ["build", "--lazy", "1", "--cow", "1"])
    assert r.exit_code == 1
    assert "kernel/broken.c:1:" in r.stderr and "undeclared_name" in r.stderr
    assert "error:" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == "nexos: error: build failed for lazy1-cow1"


def test_ctrl_c_exits_130_with_one_line(runner, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(machine_cli, "build_all", interrupted)
    r = runner.invoke(cli, ["build"])
    assert r.exit_code == 130
    assert r.stderr.strip().splitlines() == ["nexos: interrupted; QEMU stopped"]


# --------------------------------------------------------------------------- grade --configs

ALL_FOUR = ["lazy0-cow0", "lazy0-cow1", "lazy1-cow0", "lazy1-cow1"]
EXPECTED = "(expected lazy0-cow0, lazy0-cow1, lazy1-cow0 or lazy1-cow1)"


@pytest.fixture
def graded(runner, monkeypatch):
    """graded(*args) -> the configurations `nexos grade --no-build ARGS` would grade (the
    grading itself is replaced by a recorder that grades nothing)."""
    seen: list[list[BuildConfig]] = []

    def record(repo, plan, *args, **kwargs):
        seen.append([cfg for cfg, _ in plan])
        return []
    monkeypatch.setattr(course_cli, "grade_all", record)

    def grade(*args: str) -> list[str]:
        r = runner.invoke(cli, ["grade", "--no-build", *args])
        assert r.exit_code == 0, r.output
        return [c.name for c in seen.pop()]
    return grade


@pytest.fixture
def grade_plan(runner, monkeypatch):
    """grade_plan(*args) -> {configuration: [check names]} that `nexos grade --no-build ARGS`
    would run (nothing is graded)."""
    seen: list[dict[str, list[str]]] = []

    def record(repo, plan, *args, **kwargs):
        seen.append({cfg.name: [c.name for c in checks] for cfg, checks in plan})
        return []
    monkeypatch.setattr(course_cli, "grade_all", record)

    def grade(*args: str) -> dict[str, list[str]]:
        r = runner.invoke(cli, ["grade", "--no-build", *args])
        assert r.exit_code == 0, r.output
        return seen.pop()
    return grade


def test_grade_lab_runs_its_plan(grade_plan):
    from nexos.course.lab.plan import lab_plan
    want = {cfg.name: names for cfg, names in lab_plan("cow")}
    assert grade_plan("--lab", "cow") == want
    assert "smolprobe-parallel" in want["lazy1-cow1"]       # a COW lab check
    assert "smolprobe-parallel" not in want["lazy1-cow0"]   # COW is off there
    assert grade_plan("--lab", "lazy", "--configs", "lazy1-cow0") == {
        "lazy1-cow0": dict((c.name, n) for c, n in lab_plan("lazy"))["lazy1-cow0"]}


def test_grade_lab_refuses_explicit_checks(runner):
    r = runner.invoke(cli, ["grade", "--no-build", "--lab", "lazy", "--checks", "lazytests"])
    assert r.exit_code == 2
    assert "--checks and --lab do not go together" in r.output
    assert "Traceback" not in r.output


def test_hidden_program_named_like_a_builtin_replaces_its_check(grade_plan, tmp_path):
    src = tmp_path / "lazytests.c"
    src.write_text("int main(void) { return 0; }\n")
    plan = grade_plan("--configs", "lazy1-cow1", "--hidden", f"{src}:7")
    assert plan["lazy1-cow1"].count("lazytests") == 1
    assert plan["lazy1-cow1"][-1] == "lazytests"  # the hidden one, run after the built-ins


@pytest.mark.parametrize("args", [
    ["--configs", "lazy1-cow1 lazy0-cow0"],
    ["--configs", "lazy1-cow1,lazy0-cow0"],
    ["--configs", "lazy1-cow1", "--configs", "lazy0-cow0"],
    ["--configs", " lazy1-cow1 ,  lazy0-cow0, "],
    ["--configs", "lazy1-cow1 lazy1-cow1", "--configs", "lazy0-cow0,lazy1-cow1"],
])
def test_configs_forms_name_the_same_two(graded, args):
    assert graded(*args) == ["lazy1-cow1", "lazy0-cow0"]


def test_configs_default_order_and_memory(graded):
    assert graded() == ALL_FOUR
    assert graded("--configs", "lazy0-cow1", "--mem", "256") == ["lazy0-cow1-mem256"]


@pytest.mark.parametrize("value, quoted", [
    ("lazy2-cow0", "'lazy2-cow0' is not a configuration"),
    ("lazy1-cow1 lazy2-cow0", "'lazy2-cow0' is not a configuration"),
    ("lazy1-cow1+lazy0-cow0", "'lazy1-cow1+lazy0-cow0' is not a configuration"),
    ("lazy1-cow1;lazy0-cow0", "'lazy1-cow1;lazy0-cow0' is not a configuration"),
    ("LAZY1-COW1", "'LAZY1-COW1' is not a configuration"),
    ("10", "'10' is not a configuration"),
    ("lazy1-cow1-mem256", "'lazy1-cow1-mem256' is not a configuration"),
    (" , ", "' , ' names no configuration"),
])
def test_configs_errors_quote_what_was_typed(runner, value, quoted):
    r = runner.invoke(cli, ["grade", "--no-build", "--configs", value])
    assert one_line_error(r) == f"nexos: error: --configs: {quoted} {EXPECTED}"
    assert r.exit_code == 2


def test_configs_error_from_the_console_script(repo):
    """The installed entry point: one stderr line, no traceback, exit status 2."""
    nexos = Path(sys.executable).with_name("nexos")
    r = subprocess.run([str(nexos), "grade", "--no-build", "--configs", "lazy1-cow1,lazy2-cow0"],
                       capture_output=True, text=True, env={**os.environ, "NEXOS_REPO": str(repo)},
                       stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"nexos: error: --configs: 'lazy2-cow0' is not a configuration {EXPECTED}\n"


# --------------------------------------------------------------------------- a fake console

@pytest.fixture
def fake_env(fake_qemu, monkeypatch):
    """The fake QEMU of conftest.py, whose smolprobe prints a real guest transcript."""
    monkeypatch.setenv("NEXOS_QEMU", fake_qemu["qemu"])
    monkeypatch.setenv("NEXOS_REPO", str(fake_qemu["repo"]))
    return fake_qemu


def test_probe_json_and_table_on_fake_console(fake_env):
    r = CliRunner().invoke(cli, ["probe", "--no-build", "--lazy", "1", "--cow", "1", "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["config"] == "lazy1-cow1" and rec["verdict"] == "LAZY_STYLE"
    assert rec["actual_mapped_pages"] == rec["expected_active_pages_est"] == 180
    r = CliRunner().invoke(cli, ["probe", "--no-build", "--lazy", "1", "--cow", "1"],
                           env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "LAZY_STYLE" in r.stdout and "timing" in r.stdout and "decode_phase" in r.stdout


def test_grade_smolprobe_checks_on_fake_console(fake_env, tmp_path):
    junit, js = tmp_path / "grade.xml", tmp_path / "grade.json"
    r = CliRunner().invoke(cli, ["grade", "--no-build", "--configs", "lazy1-cow1", "--checks",
                                 "smolprobe-numbers,smolprobe-verdict", "--junit", str(junit),
                                 "--json", str(js)])
    assert r.exit_code == 0, r.output
    data = json.loads(js.read_text())
    assert [(c["name"], c["passed"]) for c in data["checks"]] == [
        ("smolprobe-numbers", True), ("smolprobe-verdict", True)]
    assert data["points"] == data["max_points"] == 20
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures")) == ("2", "0")


# --------------------------------------------------------------------------- plot's runs

def test_plot_plan_runs_what_its_charts_need():
    from nexos.programs.plot import PlotPlan

    eager, lazy, cow = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(1, 1)
    plan = PlotPlan((1, 2, 3), 40, (16, 64), (1, 4), branch_gen_len=8)
    assert [(c, r.command()) for c, r in plan.probes()] == [
        (eager, "smolprobe --prompt-tokens 1,2,3 --gen-len 40 --trace"),
        (lazy, "smolprobe --prompt-tokens 1,2,3 --gen-len 40 --trace"),
        (lazy, "smolprobe --prompt-tokens 1,2,3 --gen-len 13 --seq-len 16"),
        (lazy, "smolprobe --prompt-tokens 1,2,3 --gen-len 40 --seq-len 64"),
        (cow, "smolprobe --prompt-tokens 1,2,3 --gen-len 8 --samples 1"),
        (lazy, "smolprobe --prompt-tokens 1,2,3 --gen-len 8 --samples 1"),
        (cow, "smolprobe --prompt-tokens 1,2,3 --gen-len 8 --samples 4"),
        (lazy, "smolprobe --prompt-tokens 1,2,3 --gen-len 8 --samples 4"),
    ]
    assert plan.configs() == [eager, lazy, cow]
    assert PlotPlan((1, 2, 3), 40, (), ()).configs() == [eager, lazy]  # '' skips a chart


def test_plot_reads_the_default_seq_len_point_from_the_lazy_trace_run(monkeypatch, tmp_path):
    """The saved-fraction point at smolprobe's default seq_len asks for what the lazy trace
    run ran (--trace only adds lines): it is not run again, and write_plots takes its
    SUMMARY from that run; a point at another seq_len comes from its own run."""
    import nexos.programs.plot as plot
    from nexos.machine.limits import SMOLPROBE_SEQ_LEN
    from nexos.parse import parse_smolprobe
    from nexos.programs.compare import ProbeRun

    plan = plot.PlotPlan((1, 2, 3), 10, (64, SMOLPROBE_SEQ_LEN), ())
    assert [r.command() for _, r in plan.probes()] == [
        "smolprobe --prompt-tokens 1,2,3 --gen-len 10 --trace"] * 2 + [
        "smolprobe --prompt-tokens 1,2,3 --gen-len 10 --seq-len 64"]
    transcripts = Path(__file__).resolve().parents[1] / "transcripts"
    # another run's numbers for the 64 point (an eager kernel's: nothing saved), so that
    # which run gave which point shows
    trace, single = (parse_smolprobe((transcripts / f"{n}.txt").read_text())
                     for n in ("host-trace", "guest-seed-lazy0-cow0"))
    assert trace.summary and single.summary and trace.summary != single.summary
    runs = [ProbeRun(c, r.command(), res)
            for (c, r), res in zip(plan.probes(), [trace, trace, single])]
    points: list = []
    monkeypatch.setattr(plot, "plot_trace", lambda series, out, mx: out)
    monkeypatch.setattr(plot, "plot_saved", lambda p, out: points.extend(p) or out)
    plot.write_plots(plan, runs, tmp_path)
    assert [(n, saved) for n, saved, _ in points] == [
        (64, float(single.summary.saved_percent)),
        (SMOLPROBE_SEQ_LEN, float(trace.summary.saved_percent))]


def test_compare_runs_the_single_request_then_the_samples_runs():
    from nexos.programs.compare import compare_probes
    from nexos.records import ProbeRequest

    def names(probes: list) -> list[tuple[str, int | None]]:
        return [(c.name, r.samples) for c, r in probes]

    req = ProbeRequest((1, 2, 3), 10)
    assert names(compare_probes(req, None, False, 512)) == [
        ("lazy0-cow0", None), ("lazy1-cow0", None)]
    assert names(compare_probes(req, 4, False, 512)) == [
        ("lazy0-cow0", None), ("lazy1-cow0", None), ("lazy1-cow0", 4), ("lazy1-cow1", 4)]
    assert names(compare_probes(req, 2, True, 256)) == [
        (f"{n}-mem256", s) for s in (None, 2) for n in ALL_FOUR]


def test_probe_request_text_flags():
    from nexos.records import TEXT_GEN, ProbeRequest
    req = ProbeRequest.from_args(["--chat", "What's up?"])
    assert req.text == ("--chat", "What's up?") and req.gen_len == TEXT_GEN
    assert req.args() == ["--chat", "What's up?", "--gen-len", str(TEXT_GEN)]
    req = ProbeRequest.from_args(["--prompt=Hello", "--gen-len", "3", "--stop-at-eos"])
    assert req.args() == ["--prompt", "Hello", "--gen-len", "3", "--stop-at-eos"]
    assert ProbeRequest.from_args([]).args() == ["--prompt-tokens", "1,2,3", "--gen-len", "10"]


def test_cores_and_harts_follow_the_cpus_the_process_may_use():
    """`nexos` counts the cores as `nproc` does, the Makefile's qemu-llm too: under
    `taskset -c 0` one core, so one job at a time and one hart for the model's boot (a
    second hart would have no core to run on), as `nexos chat --help` shows."""
    def under(*prefix: str) -> tuple[int, int, int, int]:
        """(host_cores, llm_cpus, nproc, the --cpus default chat's help shows)."""
        def out(*argv: str) -> str:
            return subprocess.run([*prefix, *argv], capture_output=True, text=True,
                                  check=True).stdout
        cores, harts = out(sys.executable, "-c", "from nexos.machine.config import "
                           "host_cores, llm_cpus; print(host_cores(), llm_cpus())").split()
        shown = re.search(r"--cpus .*?\[default: (\d+);",
                          " ".join(out(sys.executable, "-m", "nexos", "chat", "--help").split()))
        assert shown is not None
        return int(cores), int(harts), int(out("nproc")), int(shown[1])
    assert under("taskset", "-c", "0") == (1, 1, 1, 1)
    cores, harts, nproc, shown = under()
    assert cores == nproc and harts == shown == min(LLM_CPUS, nproc)
