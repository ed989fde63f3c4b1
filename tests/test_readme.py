"""The README's promises that CI keeps: `.ci/run` runs the README's two fresh-machine commands
verbatim and in the README's order, and `pytest -m "not qemu"` starts no QEMU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRESH_MACHINE = "## On a fresh Debian/Ubuntu machine"
INNER_RUN = "NEXOS_INNER_PYTEST"  # set for the pytest that this file starts, so it skips itself


def readme_fresh_machine_commands() -> list[str]:
    """The one-line code blocks of the README's fresh-machine section, in order."""
    text = (ROOT / "README.md").read_text()
    start = text.index(FRESH_MACHINE)
    end = text.find("\n## ", start + len(FRESH_MACHINE))
    section = text[start:end if end >= 0 else len(text)]
    return [b.strip() for b in re.findall(r"^```\n(.*?)^```", section, re.M | re.S)]


def ci_commands() -> list[str]:
    """The commands that .ci/run hands to `bash -c` in the bare environment, in order."""
    return re.findall(r"\"\$\{bare\[@\]\}\" bash -c '([^']*)'", (ROOT / ".ci/run").read_text())


def test_ci_runs_the_readme_commands_verbatim_in_order():
    readme = readme_fresh_machine_commands()
    assert len(readme) == 2, f"the README's fresh-machine section should show 2 commands: {readme}"
    assert readme[0].endswith("nexos compare"), "the first command is the main demo"
    assert "pytest" in readme[1], "the second command runs the tests"
    assert ci_commands() == readme


def test_ci_runs_in_a_bare_environment():
    ci = (ROOT / ".ci/run").read_text()
    assert ('bare=(env -i HOME="$HOME" CI="${CI:-}" '
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)") in ci


@pytest.mark.skipif(os.environ.get(INNER_RUN) == "1", reason="this is the inner run")
def test_not_qemu_selection_starts_no_qemu(tmp_path: Path):
    """Run the `not qemu` selection with a qemu-system-riscv64 first on PATH that only records
    that it was started: it must never be."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    started = tmp_path / "qemu-started"
    fake = fake_bin / "qemu-system-riscv64"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {started}\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("NEXOS_QEMU", "PYTEST_XDIST_WORKER")}
    env.update(PATH=f"{fake_bin}:{env.get('PATH', '')}", **{INNER_RUN: "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not qemu", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", str(ROOT / "tests")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=1800)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert not started.exists(), "QEMU was started under -m 'not qemu':\n" + started.read_text()
    assert proc.returncode == 0, tail
    assert re.search(r"\d+ passed", proc.stdout), tail
