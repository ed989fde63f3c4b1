"""`nexos serve`'s workload options (no QEMU): with none it runs the README's workload and
says so; half a generated workload, or a mix, is refused; a workload file on the host is
checked, then written into the guest before smolserve runs.

The command runs through click's CliRunner with the build skipped and QemuSession replaced
by a fake shell that records what is typed and answers smolserve with a real guest
transcript (tests/transcripts/), so the whole path from the options to the table is the
real one but the kernel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import nexos.programs.cli as cli_mod
from nexos.cli import cli
from nexos.machine.build import host_program
from nexos.programs.serve import (
    DEFAULT_MAX_LEN,
    DEFAULT_REQUESTS,
    GUEST_WORKLOAD,
    ServeWorkload,
    check_workload,
    serve_workload,
    workload_commands,
)
from support import REPO

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts"
README = Path(__file__).resolve().parents[2] / "README.md"
README_FLAGS = ["--requests", "32", "--max-len", "2048"]


class FakeOutput:
    def __init__(self, output: str) -> None:
        self.output = output


class FakeShell:
    """A booted kernel's shell: records every command; echo prints nothing, smolserve
    prints the console text of a real run (its header line dropped)."""

    def __init__(self, typed: list[str]) -> None:
        self.typed = typed
        text = (TRANSCRIPTS / "serve-generated-lazy1-cow0.txt").read_text(encoding="utf-8")
        self.serve_output = text.partition("\n")[2]

    def __enter__(self) -> FakeShell:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, cmd: str, timeout: float = 60.0) -> FakeOutput:
        self.typed.append(cmd)
        return FakeOutput(self.serve_output if cmd.startswith("smolserve") else "")


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch, repo: Path) -> list[str]:
    """What `nexos serve` types into its guests (build skipped, QEMU faked)."""
    commands: list[str] = []
    monkeypatch.setenv("NEXOS_REPO", str(repo))
    monkeypatch.setattr(cli_mod, "prepare", lambda configs, llm, no_build: repo)
    monkeypatch.setattr(cli_mod.QemuSession, "for_config",
                        lambda *args, **kwargs: FakeShell(commands))
    return commands


def serve(*args: str) -> Result:
    return CliRunner().invoke(cli, ["serve", "--no-build", *args])


# ------------------------------------------------------------------ the resolution

def test_no_workload_is_the_readmes() -> None:
    load = serve_workload(None, None, None)
    assert load == ServeWorkload(README_FLAGS, None, load.note)
    assert load.note == ("nexos serve: no workload given: --requests 32 --max-len 2048 "
                         "(the README's)")
    assert (DEFAULT_REQUESTS, DEFAULT_MAX_LEN) == (32, 2048)


def test_the_readme_shows_that_workload() -> None:
    """The defaults are the README's serving example, not numbers of their own."""
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines()
             if ln.startswith("$ nexos serve")]
    assert lines and "no workload given: --requests 32 --max-len 2048" in lines[0], lines


@pytest.mark.parametrize("options, args", [
    ((None, 8, 256, None, None), ["--requests", "8", "--max-len", "256"]),
    ((None, 8, 256, 3, 4), ["--requests", "8", "--max-len", "256", "--seed", "3",
                            "--long-len", "4"]),
    ((None, None, None, 5, None), [*README_FLAGS, "--seed", "5"]),
    (("seed32", None, None, None, None), ["--workload", "seed32"]),
])
def test_given_workloads_have_no_note(options: tuple, args: list[str]) -> None:
    load = serve_workload(*options)
    assert load.args == args and load.file is None
    assert (load.note is None) == (options[1] is not None or options[0] is not None)


def test_a_workload_file_is_written_into_the_guest() -> None:
    load = serve_workload("my/work.txt", None, None)
    assert load == ServeWorkload(["--workload", GUEST_WORKLOAD], Path("my/work.txt"))


@pytest.mark.parametrize("options, why", [
    ((None, 8, None), "--requests needs --max-len"),
    ((None, None, 256), "--max-len needs --requests"),
    (("seed32", 8, 256), "not both"),
    (("seed32", None, 256), "not both"),
])
def test_half_or_mixed_workloads_are_refused(options: tuple, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        serve_workload(*options)


def test_seed_and_long_len_go_with_a_generated_workload_only() -> None:
    with pytest.raises(ValueError, match="--seed and --long-len go with a generated"):
        serve_workload("seed32", None, None, 1, 2)
    with pytest.raises(ValueError, match="--long-len goes with a generated"):
        serve_workload("w.txt", None, None, None, 2)


# ------------------------------------------------------------------ the command

def test_nexos_serve_with_no_options_runs_the_readmes_workload(typed: list[str]) -> None:
    r = serve()
    assert r.exit_code == 0, (r.output, r.exception)
    assert r.stdout.splitlines()[0] == ("nexos serve: no workload given: --requests 32 "
                                        "--max-len 2048 (the README's)")
    assert typed == ["smolserve --requests 32 --max-len 2048"] * 2  # eager, then lazy
    assert "lazy0-cow0" in r.stdout and "lazy1-cow1" in r.stdout


def test_json_output_stays_json(typed: list[str]) -> None:
    r = serve("--json")
    assert r.exit_code == 0, (r.output, r.exception)
    records = json.loads(r.stdout)
    assert [x["command"] for x in records] == ["smolserve --requests 32 --max-len 2048"] * 2


def test_a_given_workload_has_no_note(typed: list[str]) -> None:
    r = serve("--requests", "8", "--max-len", "256")
    assert r.exit_code == 0, (r.output, r.exception)
    assert "no workload given" not in r.stdout
    assert typed == ["smolserve --requests 8 --max-len 256"] * 2


def test_a_host_workload_file_is_typed_in_first(typed: list[str], tmp_path: Path) -> None:
    work = tmp_path / "w.txt"
    work.write_text("# two requests\nX 96 5,6,7 gen=2\nY\t64  1,2 eos\n")
    r = serve("--workload", str(work))
    assert r.exit_code == 0, (r.output, r.exception)
    session = ["echo 'X 96 5,6,7 gen=2' > /workload", "echo 'Y 64 1,2 eos' >> /workload",
               "smolserve --workload /workload"]
    assert typed == session * 2


@pytest.mark.parametrize("args, code, why", [
    (["--requests", "8"], 2, "--requests needs --max-len"),
    (["--max-len", "64"], 2, "--max-len needs --requests"),
    (["--workload", "seed32", "--requests", "8", "--max-len", "64"], 2, "not both"),
    (["--workload", "seed32", "--seed", "3"], 2, "--seed goes with a generated workload"),
])
def test_option_mistakes_are_one_line(typed: list[str], args: list[str], code: int,
                                      why: str) -> None:
    r = serve(*args)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.exit_code == code and len(lines) == 1, r.output
    assert lines[0].startswith("nexos: error: ") and why in lines[0]
    assert typed == []  # nothing booted


def test_help_shows_the_defaults() -> None:
    r = CliRunner().invoke(cli, ["serve", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert "32 when no workload is given" in text and "2048 when no workload is given" in text
    assert "--requests 32 --max-len 2048" in text


# ------------------------------------------------------------------ shared prefixes

def test_prefix_len_and_share_prefix_pass_through() -> None:
    load = serve_workload(None, 4, 64, None, None, 8, False)
    assert load.args == ["--requests", "4", "--max-len", "64", "--prefix-len", "8",
                         "--share-prefix", "0"]
    assert serve_workload("seed32", None, None, share_prefix=False).args == [
        "--workload", "seed32", "--share-prefix", "0"]
    with pytest.raises(ValueError, match="--prefix-len goes with a generated"):
        serve_workload("w.txt", None, None, prefix_len=4)
    with pytest.raises(ValueError, match="leaves no room in --max-len 9"):
        serve_workload(None, 4, 9, prefix_len=8)


@pytest.fixture(scope="module")
def host_smolserve() -> Path:
    """smolserve built for the host: the parser check_workload runs."""
    return host_program(REPO, "build/host/smolserve")


def test_prefix_and_chat_lines_are_read_and_written_back(host_smolserve: Path,
                                                         tmp_path: Path) -> None:
    """smolserve's parser (user/smolserve/workload.c) prints each request with its fields
    one space apart, a chat message as it was, CRLF as LF; the harness types those lines."""
    work = tmp_path / "w.txt"
    work.write_bytes(b'# c\r\nA 96 1,2:3 gen=2\r\n\nB\t64  "What is  the capital?"  eos\n'
                     b"C 8 5 gen=1")
    lines = check_workload(work, host_smolserve)
    assert lines == ["A 96 1,2:3 gen=2", 'B 64 "What is  the capital?" eos', "C 8 5 gen=1"]
    assert workload_commands(lines[1:2]) == [
        """echo 'B 64 "What is  the capital?" eos' > /workload"""]


@pytest.mark.parametrize("line, why", [
    ("A 9 1,2: gen=1", ":1: .*a ':' after a shared prefix"),
    ("A 9 :1 gen=1", ":1: .*a ':' after a shared prefix"),
    ("A 9 1:2:3 gen=1", ":1: .*a ':' after a shared prefix"),
    ('A 9 "it\'s" gen=1', ": request A: a chat message cannot hold a '"),
    ('A 9 "" gen=1', ":1: .*a chat message is 1-255 characters"),
    ('A 9 "a\x04b" gen=1', ":1: .*a chat message is text: no control characters"),
    ('A 9 "x" gen=1 more', ":1: .*extra text after the end field"),
    ("A 9 1 gen=1\nA 9 2 eos", ":2: .*two requests with the same id"),
    ("# only a comment\n\n", ": no requests"),
    ("A 9 1\0 gen=1", ":1: not text"),
])
def test_bad_lines_are_one_line_in_smolservers_words(line: str, why: str, host_smolserve: Path,
                                                     tmp_path: Path) -> None:
    work = tmp_path / "w.txt"
    work.write_text(line)
    with pytest.raises(ValueError, match=f"^{re.escape(str(work))}" + why) as e:
        check_workload(work, host_smolserve)
    assert "\n" not in str(e.value)


def test_the_table_shows_what_sharing_saved(monkeypatch: pytest.MonkeyPatch,
                                            typed: list[str]) -> None:
    """With a run whose requests shared a prefix, `nexos serve` adds the prefill tokens and
    KV pages it saved (the real transcript of such a run)."""
    text = (TRANSCRIPTS / "serve-prefix-lazy1-cow1.txt").read_text(encoding="utf-8")
    monkeypatch.setattr(FakeShell, "run", lambda self, cmd, timeout=60.0: FakeOutput(
        text.partition("\n")[2] if cmd.startswith("smolserve") else ""))
    r = serve("--requests", "4", "--max-len", "64", "--prefix-len", "8")
    assert r.exit_code == 0, r.output
    assert "24 tok" in r.output and "saved" in r.output, r.output
