"""Drive one NexOS kernel in QEMU over its serial console (pexpect on a pseudo-terminal).

A QemuSession boots a kernel from a pristine image (snapshot=on, or a private copy in
persistent mode), with a private swap disk when the configuration asks for swap, checks the
boot line against the requested configuration, waits for the shell prompt, and runs commands
one at a time. A kernel panic is reported at once
(KernelPanic), a hang by a timeout (QemuTimeout); in both cases QEMU is killed and the
session is finished. QEMU is always killed: by close()/__exit__, atexit, SIGTERM/SIGHUP/SIGINT
handlers, and by the kernel when this process dies (PR_SET_PDEATHSIG plus the tty hang-up).
Sessions are independent; several may run at once (one thread each).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pexpect

from nexos.machine.config import BuildConfig
from nexos.machine.limits import CHECKOUT
from nexos.machine.toolchain import find_qemu
from nexos.machine.treecopy import copy_sparse
from nexos.parse import BootInfo, ParseError, find_usertraps, parse_boot_line

PROMPT = "$ "
PROMPT_RE = re.compile(r"\n\$ ")
PANIC_LINE_RE = re.compile(r"^panic: ", re.M)
QUIET_PROMPT_SECONDS = 0.5  # a prompt not at a line start counts after this much silence
DEFAULT_LIFETIME = 3600.0   # hard cap on a QEMU process (coreutils `timeout`), seconds


class QemuError(RuntimeError):
    """Something went wrong in a session. `evidence` is the console text that shows it."""

    def __init__(self, message: str, evidence: str = "") -> None:
        super().__init__(message)
        self.evidence = evidence


class KernelPanic(QemuError):
    """The kernel printed `panic: ...`."""


class QemuTimeout(QemuError):
    """No prompt within the time limit (a hang, or a command slower than allowed)."""


class QemuExited(QemuError):
    """QEMU went away (it failed to start, or was killed)."""


class BootMismatch(QemuError):
    """The boot line does not describe the configuration that was requested."""


# Stand-ins for this boot's files in the Makefile's command line (makefile_command)
KERNEL_WORD, IMAGE_WORD, SWAP_WORD = "@KERNEL@", "@IMAGE@", "@SWAP@"


@functools.lru_cache(maxsize=None)
def makefile_command(memsize: int, cpus: int, swap: bool) -> tuple[str, ...]:
    """QEMU's command line as the checkout's Makefile has it (`make qemu-command`: QEMUOPTS,
    its one home) for this much RAM and these harts, with or without the swap disk, the
    files as KERNEL_WORD, IMAGE_WORD and SWAP_WORD; asked once per process and shape."""
    p = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(CHECKOUT), "qemu-command",
         f"MEMSIZE={memsize}", f"CPUS={cpus}", f"SWAPSIZE={1 if swap else 0}",
         f"KERNEL_FILE={KERNEL_WORD}", f"IMG={IMAGE_WORD}", f"SWAP_IMG={SWAP_WORD}"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL)
    words = tuple(p.stdout.split())
    if p.returncode != 0 or IMAGE_WORD not in " ".join(words):
        raise QemuError(f"make qemu-command in {CHECKOUT} failed: "
                        f"{(p.stderr or p.stdout).strip()[-300:]}")
    return words


@dataclass(frozen=True)
class CommandResult:
    """One shell command: its output without the echoed command line and the prompt."""

    command: str
    output: str
    seconds: float

    @property
    def usertraps(self) -> tuple[str, ...]:
        return find_usertraps(self.output)


# --------------------------------------------------------------------------- process cleanup

_live: dict[int, QemuSession] = {}  # id(session) -> session; every session with a process
_live_lock = threading.Lock()
_handlers_installed = False


def _kill_group(pid: int) -> None:
    """SIGKILL QEMU's whole process group (the `timeout` wrapper and QEMU). Never raises."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def kill_all() -> None:
    """Kill every live session's QEMU at once (safe from a signal handler or another thread)."""
    with _live_lock:
        sessions = list(_live.values())
    for s in sessions:
        s._killed = True
        if s.pid is not None:
            _kill_group(s.pid)
        s._remove_swap()  # the process may end right after this (a signal, atexit)


def _on_signal(signum: int, frame: object) -> None:
    """Kill all QEMUs, then behave as the signal normally would."""
    kill_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """Once, from the main thread: atexit, and handlers for signals still at their default."""
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    atexit.register(kill_all)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_signal)


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the harness dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def persistent_copy(image: Path, dest: Path | None = None) -> Path:
    """Copy `image` to `dest` (default: a new file in the temp dir) for a persistent session:
    boot it with snapshot=False, reboot it, and the writes of the first boot are still there.
    The copy is sparse, as mkfs makes the image: only the blocks in use take disk space."""
    if dest is None:
        fd, name = tempfile.mkstemp(prefix="nexos-", suffix=".img")
        os.close(fd)
        dest = Path(name)
    copy_sparse(image, dest)
    return dest


# --------------------------------------------------------------------------- the session

class QemuSession:
    """One booted kernel. Use as a context manager; see the module docstring."""

    def __init__(
        self,
        kernel: Path,
        image: Path,
        config: BuildConfig | None = None,
        *,
        snapshot: bool = True,
        boot_timeout: float = 120.0,
        lifetime: float = DEFAULT_LIFETIME,
        transcript: Path | TextIO | None = None,
        on_output: Callable[[str], None] | None = None,
        qemu: str | None = None,
        swap_dir: Path | None = None,
    ) -> None:
        """Nothing starts until start() (or `with`). `config` is what the boot line must say;
        its cpus/memsize are passed to QEMU (-smp/-m), and its swapsize > 0 adds a swap disk
        of that many MiB: a sparse file of this session's own in a new folder under
        `swap_dir` (default: the temp dir), removed at close(). snapshot=False writes to
        `image`."""
        self.kernel = Path(kernel)
        self.image = Path(image)
        self.config = config or BuildConfig(1, 1)
        self.snapshot = snapshot
        self.boot_timeout = boot_timeout
        self.lifetime = lifetime
        self.on_output = on_output
        self.qemu = qemu
        self.swap_dir = swap_dir
        self.swap_image: Path | None = None  # this boot's swap disk, while it runs
        self.boot: BootInfo | None = None
        self.boot_seconds: float | None = None
        self._transcript_arg = transcript
        self._transcript: TextIO | None = None
        self._own_transcript = False
        self._child: pexpect.spawn | None = None
        self._buf = ""
        self._panic_from = 0
        self._killed = False
        self._quiet = False  # no output for QUIET_PROMPT_SECONDS (see _prompt_after)
        self._scanned = 0    # _prompt_after has searched the buffer up to here
        self._lock = threading.RLock()

    @classmethod
    def for_config(cls, config: BuildConfig, repo: Path, llm: bool = False,
                   **kwargs: object) -> QemuSession:
        """A session for build/<config>/kernel with fs.img (or fs-llm.img when llm). A swap
        disk goes under build/ (on the checkout's disk, not a RAM-backed /tmp: the guest may
        write all of it)."""
        d = config.build_dir(repo)
        image = d / ("fs-llm.img" if llm else "fs.img")
        for f in (d / "kernel", image):
            if not f.is_file():
                what = f"--lazy {config.lazy} --cow {config.cow}" + (" --llm" if llm else "")
                raise QemuError(f"{f} does not exist; build it first: nexos build {what}")
        kwargs.setdefault("swap_dir", d.parent)
        return cls(d / "kernel", image, config, **kwargs)  # type: ignore[arg-type]

    # ---- properties

    @property
    def pid(self) -> int | None:
        """PID of the process QEMU runs under (the `timeout` wrapper; QEMU is its child)."""
        return self._child.pid if self._child is not None else None

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.isalive() and not self._killed

    def command_line(self) -> list[str]:
        """The full QEMU command (after the `timeout` wrapper): the Makefile's (`make
        qemu-command`, its one home) for this boot's files, the image as a snapshot unless
        persistent. The swap disk (bus 1) is there once start() has made its file."""
        files = {KERNEL_WORD: str(self.kernel), IMAGE_WORD: str(self.image),
                 SWAP_WORD: str(self.swap_image)}
        cmd = [self.qemu or find_qemu()]
        for word in makefile_command(self.config.memsize, self.config.cpus,
                                     self.swap_image is not None)[1:]:
            for placeholder, path in files.items():
                word = word.replace(placeholder, path)
            if self.snapshot and word.endswith(",id=x0"):
                word += ",snapshot=on"
            cmd.append(word)
        return cmd

    # ---- lifecycle

    def __enter__(self) -> QemuSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> QemuSession:
        """Boot: spawn QEMU, check the boot line, wait for the first prompt. Raises QemuError
        (QemuExited, QemuTimeout, KernelPanic, BootMismatch) and kills QEMU on any failure."""
        for f in (self.kernel, self.image):
            if not f.is_file():
                raise QemuError(f"{f} does not exist")
        self._make_swap()
        cmd = self.command_line()
        self._open_transcript(cmd)
        _install_handlers()
        t0 = time.monotonic()
        self._child = pexpect.spawn(
            "timeout", ["-k", "5", str(int(self.lifetime)), *cmd],
            encoding="utf-8", codec_errors="replace", echo=False, timeout=None,
            dimensions=(24, 1000), preexec_fn=_die_with_parent)
        with _live_lock:
            _live[id(self)] = self
        try:
            self._read_until(lambda: self._boot_ready(), self.boot_timeout, "boot")
            self.boot = parse_boot_line(self._buf)
            self.boot_seconds = time.monotonic() - t0
            self._check_boot(self.boot)
        except BaseException:
            self.close()
            raise
        return self

    def reboot(self) -> QemuSession:
        """Kill QEMU and boot again with the same image (persistent mode keeps its writes)."""
        self.close()
        self._buf, self._panic_from, self._killed = "", 0, False
        self.boot = self.boot_seconds = None
        return self.start()

    def close(self) -> None:
        """Kill QEMU (SIGTERM, then SIGKILL to its process group) and reap it. Idempotent."""
        with self._lock:
            child, self._child = self._child, None
            with _live_lock:
                _live.pop(id(self), None)
            if child is not None:
                try:
                    os.killpg(child.pid, signal.SIGTERM)
                except OSError:
                    pass
                deadline = time.monotonic() + 2.0
                while child.isalive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                _kill_group(child.pid)
                try:
                    child.close(force=True)
                except Exception:  # already gone; nothing left to release
                    pass
            if self._transcript is not None and self._own_transcript:
                self._transcript.close()
            self._transcript = None
            self._remove_swap()

    # ---- the swap disk

    def _make_swap(self) -> None:
        """A fresh sparse swap file of config.swapsize MiB for this boot, in a folder of its
        own: two sessions (parallel tests, two workers) never share one, and QEMU's image
        lock would refuse the second anyway. What a boot swapped out is never needed again."""
        self._remove_swap()
        if self.config.swapsize == 0:
            return
        if self.swap_dir is not None:
            self.swap_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="nexos-swap-", dir=self.swap_dir))
        path = folder / f"swap-{self.config.swapsize}M.img"
        with open(path, "wb") as f:
            f.truncate(self.config.swapsize << 20)  # sparse: no blocks until the guest writes
        self.swap_image = path

    def _remove_swap(self) -> None:
        """Delete this boot's swap file and its folder, if any. Never raises."""
        path, self.swap_image = self.swap_image, None
        if path is not None:
            shutil.rmtree(path.parent, ignore_errors=True)

    # ---- commands

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        """Type `cmd` at the prompt, wait for the next prompt, return what it printed.

        KernelPanic / QemuTimeout / QemuExited end the session (QEMU is killed)."""
        if "\n" in cmd or "\r" in cmd:
            raise ValueError("one command line at a time (no newlines)")
        if self._child is None or not self.alive:
            raise QemuExited("the session is not running (boot it first, or it was killed)")
        start = len(self._buf)
        t0 = time.monotonic()
        self._child.send(cmd + "\n")
        try:
            end = self._read_until(lambda: self._prompt_after(start), timeout, f"`{cmd}`",
                                   start)
        except QemuError:
            self.close()
            raise
        text = self._buf[start:end]
        first, nl, rest = text.partition("\n")
        if nl and first.rstrip().endswith(cmd.strip()):
            text = rest
        return CommandResult(cmd, text, time.monotonic() - t0)

    # ---- reading

    def _boot_ready(self) -> int | None:
        """End of the boot output (position of the first prompt) once the boot line is seen."""
        m = parse_boot_line_pos(self._buf)
        if m is None:
            return None
        return self._prompt_after(m)

    def _prompt_after(self, start: int) -> int | None:
        """Position where a prompt begins after `start`, or None. A prompt counts at a line
        start; at the very end of the output (no newline before it) it counts only after
        QUIET_PROMPT_SECONDS of silence, which _read_until checks."""
        m = PROMPT_RE.search(self._buf, max(start, self._scanned - len(PROMPT)))
        self._scanned = len(self._buf)
        if m:
            return m.start() + 1
        if self._quiet and self._buf.endswith(PROMPT) and len(self._buf) - start > len(PROMPT):
            return len(self._buf) - len(PROMPT)
        return None

    def _read_until(self, ready: Callable[[], int | None], timeout: float, what: str,
                    start: int = 0) -> int:
        """Read console output until ready() gives a position, and return it.
        A panic, QEMU's exit and the deadline raise QemuError subclasses."""
        assert self._child is not None
        deadline = time.monotonic() + timeout
        self._quiet = False
        self._scanned = start
        last_data = time.monotonic()
        while True:
            pos = ready()
            if pos is not None:
                return pos
            now = time.monotonic()
            if now >= deadline:
                hint = ("; is QEMU too old or a tool missing? `nexos doctor` checks them"
                        if what == "boot" else "")
                raise QemuTimeout(f"timeout after {timeout:.0f}s waiting for {what} to finish"
                                  + hint, self._buf[start:][-2000:])
            got = self._read_chunk(min(0.2, deadline - now))
            if got:
                last_data = time.monotonic()
                self._quiet = False
                self._check_panic(start)
            else:
                self._quiet = time.monotonic() - last_data >= QUIET_PROMPT_SECONDS

    def _read_chunk(self, wait: float) -> bool:
        """Append whatever QEMU printed within `wait` seconds. False when nothing came."""
        assert self._child is not None
        try:
            data = self._child.read_nonblocking(65536, timeout=max(wait, 0.01))
        except pexpect.TIMEOUT:
            return False
        except (pexpect.EOF, OSError) as e:
            why = "QEMU was killed" if self._killed else "QEMU exited"
            raise QemuExited(why, self._buf[-2000:]) from e
        data = data.replace("\r", "")
        self._buf += data
        if self._transcript is not None:
            self._transcript.write(data)
            self._transcript.flush()
        if self.on_output is not None:
            self.on_output(data)
        return True

    def _check_panic(self, start: int) -> None:
        """Raise KernelPanic if a line starting `panic: ` appeared (after reading the rest)."""
        line_start = self._buf.rfind("\n", 0, self._panic_from) + 1
        m = PANIC_LINE_RE.search(self._buf, line_start)
        self._panic_from = len(self._buf)
        if not m:
            return
        end = time.monotonic() + 3.0  # collect the rest of the panic message
        quiet_since = time.monotonic()
        while time.monotonic() < end and time.monotonic() - quiet_since < 0.5:
            try:
                if self._read_chunk(0.1):
                    quiet_since = time.monotonic()
            except QemuExited:
                break
        line = self._buf[m.start():].split("\n", 1)[0].strip()
        evidence = self._buf[max(start, m.start() - 1500):][-3000:]
        raise KernelPanic(f"kernel {line}", evidence)

    def _check_boot(self, boot: BootInfo) -> None:
        """BootMismatch unless the boot line says what we built and asked QEMU for."""
        want = self.config
        got = (boot.lazy, boot.cow, boot.cpus, boot.mem, boot.swap)
        exp = (want.lazy, want.cow, want.cpus, want.memsize, want.swapsize)
        if got != exp:
            # a kernel from before swap prints no swap= at all: say so, it is not a size typo
            hint = (" (this kernel prints no swap=: it has no swap support)"
                    if want.swapsize and " swap=" not in boot.line else "")
            raise BootMismatch(
                f"boot line `{boot.line}` does not match the requested LAZY_ALLOC={want.lazy} "
                f"COW_ALLOC={want.cow} cpus={want.cpus} mem={want.memsize}M "
                f"swap={want.swapsize}M{hint}", boot.line)

    def _open_transcript(self, cmd: list[str]) -> None:
        t = self._transcript_arg
        if t is None:
            return
        if isinstance(t, (str, Path)):
            self._transcript = open(t, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)
            self._own_transcript = True
        else:
            self._transcript = t
        self._transcript.write("# " + " ".join(cmd) + "\n")


def parse_boot_line_pos(text: str) -> int | None:
    """Position just after the boot line, or None if it has not appeared yet."""
    try:
        b = parse_boot_line(text)
    except ParseError:
        return None
    return text.find(b.line) + len(b.line)
