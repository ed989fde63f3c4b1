"""`nexos doctor` (docs/harness.md, "nexos doctor"): in this environment, which
scripts/setup.sh made, every required item is found (exit 0); with the compiler and QEMU
off PATH, or a QEMU too old, it exits 1 and names the fix; --json parses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.doctor import QEMU_MIN, qemu_version
from nexos.machine.qemu import QemuSession, QemuTimeout

# What stays on the trimmed PATH: every tool but the cross compiler and QEMU.
KEPT = ("make", "gcc", "gdb-multiarch", "ccache", "sh")


def doctor(repo: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NEXOS_QEMU"}
    env.update(NEXOS_REPO=str(repo), COLUMNS="200")
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "nexos", "doctor", *args], env=env,
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def findings(r: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    data = json.loads(r.stdout)
    assert data["ok"] == (r.returncode == 0)
    return {f["name"]: f for f in data["findings"]}


def trimmed_path(tmp_path: Path, extra: dict[str, str] | None = None) -> str:
    """A PATH of links to the KEPT tools only, plus the scripts in `extra`."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in KEPT:
        found = shutil.which(tool)
        assert found, f"{tool} is not installed (scripts/setup.sh installs it)"
        (d / tool).symlink_to(found)
    for name, text in (extra or {}).items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return str(d)


@pytest.mark.qemu  # runs the real qemu-system-riscv64 (--version, -machine help, -accel help)
def test_everything_is_found_here(repo):
    r = doctor(repo, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    f = findings(r)
    for name in ("RISC-V cross compiler", "QEMU", "accelerator", "make", "host C compiler",
                 "gdb-multiarch", "python: click", "python: pexpect", "python: rich",
                 "model asset"):
        assert f[name]["ok"], f[name]
    assert "-march=rv64imac_zicsr_zifencei -mabi=lp64" in f["RISC-V cross compiler"]["detail"]
    assert f["accelerator"]["found"] == "TCG"
    version = qemu_version(f["QEMU"]["found"])
    assert version is not None and version >= QEMU_MIN
    human = doctor(repo)
    assert human.returncode == 0 and "everything required is there" in human.stdout
    assert "Traceback" not in human.stdout + human.stderr


def test_missing_compiler_and_qemu_exit_1_with_the_fix(repo, tmp_path):
    path = trimmed_path(tmp_path)
    r = doctor(repo, "--json", path=path)
    assert r.returncode == 1, r.stdout + r.stderr
    f = findings(r)
    cc, qemu = f["RISC-V cross compiler"], f["QEMU"]
    assert not cc["ok"] and cc["found"] == "not found"
    assert "apt-get install -y gcc-riscv64-unknown-elf" in cc["fix"]
    assert not qemu["ok"] and "apt-get install -y qemu-system-misc" in qemu["fix"]
    assert "scripts/setup.sh" in qemu["fix"]
    broken = {n for n, x in f.items() if x["required"] and not x["ok"]}
    assert broken == {"RISC-V cross compiler", "QEMU", "accelerator"}   # the rest is found
    human = doctor(repo, path=path)
    assert human.returncode == 1 and "Traceback" not in human.stdout + human.stderr
    assert "gcc-riscv64-unknown-elf" in human.stdout and "qemu-system-misc" in human.stdout
    assert "3 required item(s) missing" in human.stdout


def test_a_qemu_too_old_is_named(repo, tmp_path):
    old = "#!/bin/sh\necho 'QEMU emulator version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6)'\n"
    path = trimmed_path(tmp_path, {"qemu-system-riscv64": old})
    f = findings(doctor(repo, "--json", path=path))
    qemu = f["QEMU"]
    assert not qemu["ok"] and "6.2.0" in qemu["found"]
    assert "needs 7.1 or newer" in qemu["detail"] and "qemu-system-misc" in qemu["fix"]


def test_qemu_version():
    assert qemu_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7)") == (7, 2, 22)
    assert qemu_version("QEMU emulator version 8.2") == (8, 2)
    assert qemu_version("no version here") is None


def test_a_boot_that_never_finishes_points_at_doctor(tmp_path):
    """The harness's boot timeout (a QEMU that prints nothing, as an old one without the
    Sstc timer does) names `nexos doctor`."""
    silent = tmp_path / "silent-qemu"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    silent.chmod(0o755)
    kernel, image = tmp_path / "kernel", tmp_path / "fs.img"
    kernel.write_bytes(b"\0")
    image.write_bytes(b"\0" * 1024)
    s = QemuSession(kernel, image, BuildConfig(1, 1), qemu=str(silent), boot_timeout=1,
                    lifetime=30)
    with pytest.raises(QemuTimeout) as e:
        s.start()
    assert "waiting for boot to finish" in str(e.value)
    assert "`nexos doctor` checks them" in str(e.value)
