"""Fixtures every product's tests use: the checkout, the host build of the user programs,
kernels built through make (once per session and worker, under a per-configuration file
lock), the README's grade, a fake QEMU; the rule that a skip under CI fails, the `qemu`
marker's guard. A folder's own fixtures are in its conftest.py; helpers that tests import
are in support.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.toolchain import ToolchainError, find_toolchain
from support import (
    BY_DESIGN,
    QEMU_GUARD,
    REPO,
    GradeRun,
    build_locks,
    locked_build,
    shared_dir,
    shared_once,
)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if not (os.environ.get("CI") and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not reason.removeprefix("Skipped: ").startswith(BY_DESIGN):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where nothing may be missing: {reason}"


# Fixtures that build a kernel: a test that uses one (directly or through another fixture)
# boots QEMU, so it carries the `qemu` marker without having to say so, and
# `pytest -m "not qemu"` leaves it out (docs/testing.md).
KERNEL_FIXTURES = {"build_kernel", "kernel11", "readme_grade"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.qemu)
        if item.get_closest_marker("qemu") is None:
            item.add_marker(pytest.mark.quick)   # the quick tier: everything that boots nothing
    # the tests marked `long` (minutes each) first and the quick tier (seconds each) last,
    # so that the two workers of -n 2 are not left with one of them at the end while the
    # other idles: the short tests fill the gaps
    items.sort(key=lambda item: (item.get_closest_marker("long") is None,
                                 item.get_closest_marker("quick") is not None))


@pytest.fixture(scope="session")
def qemu_recorder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a stand-in qemu-system-riscv64 that appends its arguments to the
    file `started` beside it and exits 1."""
    d = tmp_path_factory.mktemp("qemu-guard")
    fake = d / "qemu-system-riscv64"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {d / "started"}\nexit 1\n')
    fake.chmod(0o755)
    return d


@pytest.fixture(autouse=True)
def no_qemu_unless_marked(request: pytest.FixtureRequest,
                          monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("qemu") is not None:
        yield
        return
    guard = request.getfixturevalue("qemu_recorder")
    started = guard / "started"
    started.unlink(missing_ok=True)
    monkeypatch.delenv("NEXOS_QEMU", raising=False)
    monkeypatch.setenv("PATH", f"{guard}:{os.environ.get('PATH', '')}")
    yield
    if started.exists():
        pytest.fail(f"{QEMU_GUARD}: qemu-system-riscv64 {started.read_text().strip()}",
                    pytrace=False)


@pytest.fixture(scope="session")
def readme_grade(build_kernel, tmp_path_factory: pytest.TempPathFactory) -> GradeRun:
    """`nexos grade --junit report.xml`, the README's grading command with its defaults,
    run once per session on this checkout for every test that reads its report (all four
    configurations, every default check)."""
    from nexos.machine.config import matrix

    def grade() -> GradeRun:
        for c in matrix():
            build_kernel(c, llm=True)
        report = shared_dir(tmp_path_factory) / "readme-grade.xml"
        env = {**os.environ, "COLUMNS": "100"}
        env.pop("NEXOS_REPO", None)
        with build_locks(matrix()):
            p = subprocess.run([sys.executable, "-m", "nexos", "grade", "--junit", str(report)],
                               cwd=REPO, env=env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=3000)
        return GradeRun(p.returncode, p.stdout, p.stderr,
                        report.read_text() if report.is_file() else "")
    return shared_once(tmp_path_factory, "readme-grade", grade)


@pytest.fixture(scope="session")
def host_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the host build (tests/host/Makefile: smolprobe with its test hooks,
    mathcheck, tokcheck, kvcheck, fdtcheck), made once per session and worker."""
    if shutil.which("gcc") is None:
        pytest.skip("needs the host gcc")
    out = tmp_path_factory.mktemp("host")
    p = subprocess.run(["make", "-s", "-C", str(REPO / "tests/host"), f"OUT={out}"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.fixture(scope="session")
def build_kernel(tmp_path_factory: pytest.TempPathFactory):
    """build_kernel(config, llm=False) -> build dir; runs make once per build folder (and
    llm) per session, for both pytest-xdist workers: RAM, harts and swap are chosen at boot, and
    an LLM build has the plain images too. A folder that either worker has built (a mark
    in the session's shared folder: the sources do not change during a run) needs no make
    and no lock, so a worker does not wait out another's lock on it (held while a README
    command runs make there itself, finding everything up to date). A missing toolchain
    or a failed build fails the test with the reason."""
    done: dict[tuple[str, bool], Path] = {}
    marks = shared_dir(tmp_path_factory) / "built"

    def mark(name: str, llm: bool) -> Path:
        return marks / f"{name}{'-llm' if llm else ''}"

    def build(config: BuildConfig, llm: bool = False) -> Path:
        for key in ((config.folder, True), (config.folder, llm)):  # LLM: the plain images too
            if key in done or mark(*key).is_file():
                return done.setdefault(key, config.build_dir(REPO))
        key = (config.folder, llm)
        try:
            find_toolchain()
        except ToolchainError as e:
            pytest.fail(f"cannot build the kernel for this test: {e}", pytrace=False)
        if not (REPO / "Makefile").is_file():
            pytest.fail("no Makefile in the checkout; cannot build the kernel", pytrace=False)
        res = locked_build(config, llm)
        if not res.ok:
            pytest.fail(f"make for {config.folder} failed:\n{res.excerpt}", pytrace=False)
        done[key] = res.build_dir
        marks.mkdir(parents=True, exist_ok=True)
        mark(*key).touch()
        return done[key]

    return build


# The fake QEMU's smolprobe run prints the checked-in guest transcript of the seed command
# on the lazy kernel (tests/transcripts/README.md), without its `# ` header line.
SEED_TRANSCRIPT = REPO / "tests" / "transcripts" / "guest-seed-lazy1-cow0.txt"

FAKE_QEMU = r'''
import os, sys, time
with open(@SEED_TRANSCRIPT@) as f:
    SEED_LAZY = f.read().split("\n", 1)[1]
args = sys.argv[1:]
mem = args[args.index("-m") + 1].rstrip("M")
cpus = args[args.index("-smp") + 1]
lazy = "0" if "lazy0" in " ".join(args) else "1"
# a swap disk (id=x1) is reported as a swapping kernel does (unless FAKE_QEMU_NO_SWAP: a
# kernel that predates swap); without one, the line of a kernel that predates swap
swap = ""
for a in args:
    if a.startswith("file=") and a.endswith(",id=x1") and not os.environ.get("FAKE_QEMU_NO_SWAP"):
        swap = " swap=%dM" % (os.path.getsize(a[5:].split(",")[0]) >> 20)
out = sys.stdout
def say(s):
    out.write(s.replace("\n", "\r\n")); out.flush()
say("\nfake-qemu booting\nnexos: LAZY_ALLOC=%s COW_ALLOC=1 cpus=%s mem=%sM%s\n"
    % (lazy, cpus, mem, swap))
say("init: starting sh\n$ ")
for line in sys.stdin:
    cmd = line.strip()
    say(cmd + "\n")
    if cmd == "crash":
        say("about to die\npanic: fake kernel panic\nbacktrace: 0x80001234\n")
        while True:
            time.sleep(1)
    elif cmd == "hang":
        while True:
            time.sleep(1)
    elif cmd == "noeol":
        say("no newline at the end")
    elif cmd.startswith("echo "):
        say(cmd[5:] + "\n")
    elif cmd == "usertests -q":
        say("test a: OK\nALL TESTS PASSED\n")
    elif cmd == "lazytests":
        say("test lazy: FAILED\nSOME TESTS FAILED\n")
    elif cmd == "cowtests":
        say("test cow: \npanic: fake cow panic\n")
        while True:
            time.sleep(1)
    elif cmd == "smolprobe --prompt-tokens 1,2,3 --gen-len 10":
        say(SEED_LAZY)
    elif cmd.startswith("smolprobe --prompt-tokens 1,2,3 --gen-len 1000000"):
        say("[smolprobe] error: prompt+gen (1000003) exceeds seq_len (256)\n")
    elif cmd == "tests":
        say("test one: OK\nusertrap: pid 3 name t cause 13 va 0x0\nSOME TESTS FAILED\n")
    elif cmd:
        say("exec %s failed\n" % cmd.split()[0])
    say("$ ")
'''.replace("@SEED_TRANSCRIPT@", repr(str(SEED_TRANSCRIPT)))


@pytest.fixture
def fake_qemu(tmp_path: Path) -> dict[str, Path | str]:
    """A stand-in for qemu-system-riscv64 speaking the console protocol (boot line, prompt,
    echo), with commands `crash` (panic), `hang`, `noeol`, `echo X`, `tests`, usertests
    (pass), lazytests (fail), cowtests (panic), and the default smolprobe run (seed output).
    Also a fake checkout (`repo`) whose build/lazy1-cow1 holds a kernel and both images
    (the small checks' machine boots the same build: grade.py)."""
    script = tmp_path / "fake-qemu"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAKE_QEMU))
    os.chmod(script, 0o755)
    kernel = tmp_path / "lazy1-cow1-kernel"
    image = tmp_path / "fs.img"
    kernel.write_bytes(b"\0")
    image.write_bytes(b"\0" * 1024)
    fake_repo = tmp_path / "repo"
    bd = fake_repo / "build" / "lazy1-cow1"
    bd.mkdir(parents=True)
    for name in ("kernel", "fs.img", "fs-llm.img"):
        (bd / name).write_bytes(b"\0")
    (fake_repo / "kernel").mkdir()
    (fake_repo / "user").mkdir()
    return {"qemu": str(script), "kernel": kernel, "image": image, "repo": fake_repo}
