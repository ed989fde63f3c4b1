"""The README's promises that CI keeps: `.ci/run` runs the README's two fresh-machine commands
verbatim and in the README's order, `pytest -m "not qemu"` starts no QEMU, and the quick tier
(`pytest -m quick`) is every test that boots nothing plus the one boot it names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import QEMU_GUARD

ROOT = Path(__file__).resolve().parents[2]
FRESH_MACHINE = "## On a fresh Debian/Ubuntu machine"


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
    assert "bare=(bash scripts/hermetic.sh)" in ci


def test_hermetic_hides_tmp_home_and_the_callers_environment(tmp_path: Path):
    """scripts/hermetic.sh (what .ci/run runs the README's commands in): a file left in /tmp
    and the caller's variables are invisible; the new /tmp holds only the empty HOME (and the
    way to the working folder, when that is under /tmp)."""
    left = tmp_path / "left-by-an-earlier-run"
    left.write_text("x")
    probe = ('ls -A /tmp; echo "--"; ls -A "$HOME"; echo "--"; env; echo "--"; '
             f'test -e {left} && echo visible || echo hidden; pwd')
    env = dict(os.environ, NEXOS_LEAK="1", PIP_INDEX_URL="http://nowhere.invalid/")
    p = subprocess.run(["bash", str(ROOT / "scripts/hermetic.sh"), "bash", "-c", probe],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    in_tmp, home, variables, rest = p.stdout.split("--\n")
    env_of = dict(line.split("=", 1) for line in variables.splitlines() if "=" in line)
    assert set(env_of) <= {"HOME", "CI", "PATH", "PWD", "SHLVL", "_"}, env_of
    home_path = Path(env_of["HOME"])
    assert home_path.parent == Path("/tmp") and home == ""
    under_tmp = ROOT.parts[1] == "tmp"
    assert set(in_tmp.split()) == {home_path.name} | ({ROOT.parts[2]} if under_tmp else set())
    assert rest.split() == ["hidden", str(ROOT)]


# One collection (nothing runs) that prints each test's node id and the markers `-m`
# selects on: which tests a selection such as `-m quick` takes follows from them.
COLLECT_MARKERS = """
import sys
import pytest

class Markers:
    def pytest_collection_finish(self, session):
        for item in session.items:
            names = sorted({m.name for m in item.iter_markers()})
            print("MARKED", item.nodeid, " ".join(names), sep="\\t")

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Markers()]))
"""


def collected_markers() -> dict[str, set[str]]:
    """Node id -> the names of its markers, for every test pytest collects in this
    checkout (after tests/conftest.py has added `qemu` and `quick`)."""
    p = subprocess.run([sys.executable, "-c", COLLECT_MARKERS], cwd=ROOT, capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [ln.split("\t")[1:] for ln in p.stdout.splitlines() if ln.startswith("MARKED\t")]
    return {node: set(names.split()) for node, names in rows}


def test_the_quick_tier_is_what_boots_nothing_and_one_boot():
    readme = (ROOT / "README.md").read_text()
    assert "`.venv/bin/python -m pytest -n 2 -m quick`" in readme
    marks = collected_markers()
    quick = {node for node, names in marks.items() if "quick" in names}
    qemu = {node for node, names in marks.items() if "qemu" in names}
    not_qemu = set(marks) - qemu
    assert not_qemu <= quick and len(not_qemu) > 400
    assert quick - not_qemu == {"tests/harness/test_qemu.py::test_real_boot_line_and_echo"}
    assert quick | qemu == set(marks)


GUARD_PROBE = """
import subprocess
import pytest

def test_unmarked_starts_qemu():
    subprocess.run(["qemu-system-riscv64", "-machine", "help"], capture_output=True)

def test_unmarked_boots_nothing():
    pass

@pytest.mark.qemu
def test_marked_may_start_qemu():
    p = subprocess.run(["qemu-system-riscv64", "-version"], capture_output=True, text=True)
    assert "QEMU emulator" in p.stdout
"""


@pytest.mark.qemu  # its probe's marked test starts the real QEMU (-version only)
def test_an_unmarked_test_that_starts_qemu_fails(tmp_path: Path):
    """The guard of tests/conftest.py, which makes every run prove that `pytest -m "not
    qemu"` boots nothing: a test without the marker that starts QEMU fails, naming it; one
    that does not passes; a marked one starts the real QEMU."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(GUARD_PROBE)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), COLUMNS="300")
    # its own --basetemp, inside this test's tmp_path: a second pytest in pytest's shared
    # temporary root would prune the older runs' numbered folders there (tens of seconds
    # where earlier runs left some)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:xdist",
                        "-p", "no:cacheprovider", "-p", "conftest", "--rootdir", str(tmp_path),
                        "--basetemp", str(tmp_path / "basetemp"), str(probe)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert re.search(r"^ERROR .*test_unmarked_starts_qemu - Failed: " + QEMU_GUARD
                     + r": qemu-system-riscv64 -machine help", out, re.M), out
    assert re.search(r"^PASSED .*test_unmarked_boots_nothing", out, re.M), out
    assert re.search(r"^PASSED .*test_marked_may_start_qemu", out, re.M), out


BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MODEL_TARGET = "build/models/smollm-135m-int8-seed0.bin"


def make_model_without(tmp_path: Path, *make_args: str) -> subprocess.CompletedProcess[str]:
    """make the default checkpoint in a folder holding only the Makefile (no .venv there)."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    return subprocess.run(["make", *make_args, MODEL_TARGET], cwd=tmp_path, text=True,
                           capture_output=True, env={"PATH": BARE_PATH, "HOME": str(tmp_path)})


def test_make_without_the_venv_names_the_setup_command(tmp_path: Path):
    r = make_model_without(tmp_path)
    assert r.returncode != 0
    assert "no Python environment for NexOS (.venv/bin/python); set it up first: " \
           "bash scripts/setup.sh" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / MODEL_TARGET).exists()


def test_make_with_an_interpreter_lacking_the_harness_says_so(tmp_path: Path):
    r = make_model_without(tmp_path, "PYTHON=/bin/false")
    assert r.returncode != 0
    assert "/bin/false cannot import the nexos harness; run: bash scripts/setup.sh" in r.stderr


def test_benchmarks_under_a_bare_interpreter_name_the_venv():
    """`python3 bench/<name>.py` with an interpreter that has no packages (-S: no
    site-packages) says which interpreter to use, in one line."""
    r = subprocess.run([sys.executable, "-S", str(ROOT / "bench/boot_time.py"), "--help"],
                       text=True, capture_output=True, cwd=ROOT)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "run the benchmarks with the project's interpreter, .venv/bin/python" in r.stderr
