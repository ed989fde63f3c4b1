"""The command line: help, one-line errors, exit codes (no QEMU needed)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

import nexos.cli as cli_mod
from nexos.cli import cli

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
    (["grade", "--configs", "lazy7-cow0", "--no-build"], "LAZY_ALLOC"),
    (["probe", "--no-build", "--gen-len", "abc"], "abc"),
])
def test_user_mistakes_are_one_line(runner, args, needle):
    r = runner.invoke(cli, args)
    assert needle in one_line_error(r)


def test_unbuilt_configuration_is_one_line(runner):
    r = runner.invoke(cli, ["run", "--no-build", "--mem", "2048", "--", "echo hi"])
    line = one_line_error(r)
    assert "lazy1-cow1-mem2048" in line and "nexos build" in line


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
    monkeypatch.setattr(cli_mod, "build_all", interrupted)
    r = runner.invoke(cli, ["build"])
    assert r.exit_code == 130
    assert r.stderr.strip().splitlines() == ["nexos: interrupted; QEMU stopped"]


@pytest.fixture
def fake_env(fake_qemu, monkeypatch):
    monkeypatch.setenv("NEXOS_QEMU", fake_qemu["qemu"])
    monkeypatch.setenv("NEXOS_REPO", str(fake_qemu["repo"]))
    return fake_qemu


def test_run_streams_and_reports_failures(fake_env):
    r = CliRunner().invoke(cli, ["run", "--no-build", "--", "echo hi there", "usertests"])
    assert r.exit_code == 0, r.output
    assert "hi there" in r.stdout and "ALL TESTS PASSED" in r.stdout
    r = CliRunner().invoke(cli, ["run", "--no-build", "--", "echo a", "tests", "echo b"])
    assert r.exit_code == 1
    assert "SOME TESTS FAILED" in r.stdout and "echo b" in r.stdout  # later commands still run
    assert "`tests` failed" in r.stderr
    r = CliRunner().invoke(cli, ["run", "--no-build", "--", "crash", "echo never"])
    assert r.exit_code == 1 and "panic: fake kernel panic" in r.stderr
    assert "never" not in r.stdout


def test_grade_end_to_end_on_fake_kernel(fake_env, tmp_path):
    junit, js = tmp_path / "grade.xml", tmp_path / "grade.json"
    r = CliRunner().invoke(cli, ["grade", "--no-build", "--configs", "lazy1-cow1",
                                 "--junit", str(junit), "--json", str(js)])
    assert r.exit_code == 1  # lazytests fails, cowtests panics
    data = json.loads(js.read_text())
    got = {c["name"]: c["passed"] for c in data["checks"]}
    assert got == {"usertests": True, "lazytests": False, "cowtests": False,
                   "smolprobe-numbers": True, "smolprobe-verdict": True,
                   "smolprobe-errors": True}
    cow = next(c for c in data["checks"] if c["name"] == "cowtests")
    assert "panic: fake cow panic" in cow["message"]
    assert data["points"] == 20 + 10 + 10 + 5 and data["max_points"] == 75
    root = ET.parse(junit).getroot()
    assert root.get("tests") == "6" and root.get("failures") == "2"


def test_probe_table_and_json_on_fake_kernel(fake_env):
    r = CliRunner().invoke(cli, ["probe", "--no-build", "--lazy", "1", "--cow", "1", "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["actual_mapped_pages"] == 179 and rec["verdict"] == "LAZY_STYLE"
    assert rec["expected_active_pages_est"] == 180
