"""QemuSession: protocol logic against a fake QEMU, then the real kernel (built via make)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import (
    BootMismatch,
    KernelPanic,
    QemuExited,
    QemuSession,
    QemuTimeout,
    persistent_copy,
)
from support import REPO, children_of, default_sigint, proc_alive


def wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    """PIDs still alive after waiting up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if proc_alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if proc_alive(p)]


def fake_session(fq, config=None, **kw) -> QemuSession:
    return QemuSession(fq["kernel"], fq["image"], config or BuildConfig(1, 1),
                       qemu=fq["qemu"], boot_timeout=20, lifetime=60, **kw)


# --------------------------------------------------------------------------- the command

def test_command_line_is_the_makefiles(tmp_path):
    """QEMU's command line has one home, the Makefile's QEMUOPTS: the session's is `make
    qemu-command` for its files, with the image as a snapshot unless persistent."""
    kernel, image = tmp_path / "kernel", tmp_path / "fs.img"
    cfg = BuildConfig(1, 0, memsize=256, cpus=2)
    make = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(REPO), "qemu-command", "MEMSIZE=256",
         "CPUS=2", f"KERNEL_FILE={kernel}", f"IMG={image}", "QEMU=/usr/bin/q"],
        capture_output=True, text=True, check=True).stdout.split()
    s = QemuSession(kernel, image, cfg, qemu="/usr/bin/q")
    assert s.command_line() == [w + ",snapshot=on" if w.endswith(",id=x0") else w
                                for w in make]
    assert "-m" in make and make[make.index("-m") + 1] == "256M" and "id=x1" not in str(make)
    assert QemuSession(kernel, image, cfg, qemu="/usr/bin/q",
                       snapshot=False).command_line() == make


# --------------------------------------------------------------------------- fake QEMU

def test_fake_boot_echo_and_output(fake_qemu, tmp_path):
    log = tmp_path / "console.log"
    with fake_session(fake_qemu, BuildConfig(1, 1, cpus=2), transcript=log) as s:
        assert s.boot.cpus == 2 and s.boot.mem == 512
        assert s.boot_seconds > 0
        r = s.run("echo hello world", timeout=10)
        assert r.output == "hello world\n"
        r = s.run("noeol", timeout=10)  # prompt right after text: accepted after a quiet gap
        assert r.output == "no newline at the end"
        r = s.run("tests", timeout=10)
        assert r.usertraps == ("usertrap: pid 3 name t cause 13 va 0x0",)
    text = log.read_text()
    assert "nexos: LAZY_ALLOC=1" in text and "hello world" in text and "-smp 2" in text


def test_fake_panic_is_reported_with_evidence_and_kills(fake_qemu):
    s = fake_session(fake_qemu).start()
    pid = s.pid
    with pytest.raises(KernelPanic) as e:
        s.run("crash", timeout=30)
    assert "panic: fake kernel panic" in str(e.value)
    assert "about to die" in e.value.evidence and "backtrace" in e.value.evidence
    assert not s.alive and wait_gone([pid]) == []


def test_fake_timeout_gives_tail_and_kills(fake_qemu):
    with fake_session(fake_qemu) as s:
        pid = s.pid
        t0 = time.monotonic()
        with pytest.raises(QemuTimeout) as e:
            s.run("hang", timeout=1.5)
        assert time.monotonic() - t0 < 10
        assert "hang" in e.value.evidence
        assert wait_gone([pid]) == []
        with pytest.raises(QemuExited):
            s.run("echo again")


def test_fake_boot_mismatch(fake_qemu):
    s = fake_session(fake_qemu, BuildConfig(0, 1))  # the fake says LAZY_ALLOC=1
    with pytest.raises(BootMismatch) as e:
        s.start()
    assert "LAZY_ALLOC=0" in str(e.value)
    assert s.pid is None


def test_fake_missing_files(fake_qemu, tmp_path):
    s = QemuSession(tmp_path / "nope", fake_qemu["image"], qemu=fake_qemu["qemu"])
    with pytest.raises(Exception, match="does not exist"):
        s.start()


# --------------------------------------------------------------------------- harness killed

KILLED_SCRIPT = r"""
import sys
from pathlib import Path
from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
kernel, image, qemu, cmd = sys.argv[1:5]
s = QemuSession(Path(kernel), Path(image), BuildConfig(1, 1), qemu=qemu or None,
                boot_timeout=100, lifetime=110).start()
print("PID", s.pid, flush=True)
s.run(cmd, timeout=100)
"""


def run_and_kill(kernel: Path, image: Path, qemu: str, cmd: str, sig: int) -> list[int]:
    """Start a harness process that boots and hangs in `cmd`, send it `sig`; return the
    QEMU-side PIDs (wrapper and QEMU) that are still alive afterwards."""
    p = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, str(kernel), str(image), qemu, cmd],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                         preexec_fn=default_sigint)
    try:
        line = p.stdout.readline()
        assert line.startswith("PID "), f"harness did not boot: {line!r}"
        wrapper = int(line.split()[1])
        pids = [wrapper, *children_of(wrapper)]
        assert len(pids) == 2, "expected the timeout wrapper and one QEMU process"
        time.sleep(0.5)  # let the command start
        p.send_signal(sig)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return wait_gone(pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_fake_killed_harness_leaves_no_qemu(fake_qemu, sig):
    left = run_and_kill(fake_qemu["kernel"], fake_qemu["image"], fake_qemu["qemu"], "hang", sig)
    assert left == []


# --------------------------------------------------------------------------- the real kernel

@pytest.mark.qemu
@pytest.mark.quick   # the quick tier's smoke test: the kernel builds, boots and runs a command
def test_real_boot_line_and_echo(kernel11):
    cfg, d = kernel11
    with QemuSession(d / "kernel", d / "fs.img", cfg, lifetime=120) as s:
        assert (s.boot.lazy, s.boot.cow, s.boot.cpus, s.boot.mem) == (1, 1, 1, 512)
        assert s.boot_seconds < 60
        assert s.run("echo hello", timeout=30).output == "hello\n"


@pytest.mark.qemu
def test_real_wrong_config_is_detected(kernel11):
    _, d = kernel11
    with pytest.raises(BootMismatch):
        QemuSession(d / "kernel", d / "fs.img", BuildConfig(0, 1), lifetime=120).start()


@pytest.mark.qemu
def test_real_timeout_mid_command_kills_qemu(kernel11):
    cfg, d = kernel11
    s = QemuSession(d / "kernel", d / "fs.img", cfg, lifetime=120).start()
    pids = [s.pid, *children_of(s.pid)]
    with pytest.raises(QemuTimeout):
        s.run("cat", timeout=2)  # cat reads the console forever
    assert wait_gone(pids) == []


@pytest.mark.qemu
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_real_killed_harness_leaves_no_qemu(kernel11, sig):
    _, d = kernel11
    assert run_and_kill(d / "kernel", d / "fs.img", "", "cat", sig) == []


@pytest.mark.qemu
def test_real_two_sessions_at_once(kernel11):
    cfg, d = kernel11
    outputs: dict[int, str] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with QemuSession(d / "kernel", d / "fs.img", cfg, lifetime=120) as s:
                outputs[i] = s.run(f"echo session{i}", timeout=30).output
        except BaseException as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors
    assert outputs == {0: "session0\n", 1: "session1\n"}


@pytest.mark.qemu
def test_real_persistent_image_survives_reboot(kernel11, tmp_path):
    cfg, d = kernel11
    img = persistent_copy(d / "fs.img", tmp_path / "disk.img")
    with QemuSession(d / "kernel", img, cfg, snapshot=False, lifetime=120) as s:
        s.run("echo persisted > note", timeout=30)
        s.reboot()
        assert s.run("cat note", timeout=30).output == "persisted\n"
    # the pristine image is untouched by snapshot sessions
    with QemuSession(d / "kernel", d / "fs.img", cfg, lifetime=120) as s:
        s.run("echo scratch > note2", timeout=30)
    with QemuSession(d / "kernel", d / "fs.img", cfg, lifetime=120) as s:
        assert "note2" not in s.run("ls", timeout=30).output


@pytest.mark.qemu
def test_real_panic_at_boot_is_caught(kernel11, tmp_path):
    """A zeroed disk is not a file system: the kernel panics while booting; the session must
    report it with the console evidence and leave no QEMU behind."""
    cfg, d = kernel11
    blank = tmp_path / "blank.img"
    blank.write_bytes(b"\0" * (2 << 20))
    s = QemuSession(d / "kernel", blank, cfg, boot_timeout=60, lifetime=120)
    with pytest.raises(KernelPanic) as e:
        s.start()
    assert str(e.value).startswith("kernel panic: ")
    assert "nexos: LAZY_ALLOC=1 COW_ALLOC=1" in e.value.evidence
    assert s.pid is None and not s.alive
