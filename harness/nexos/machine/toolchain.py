"""Locate the RISC-V cross compiler and QEMU on the host."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

GCC_PREFIXES = ("riscv64-unknown-elf-", "riscv64-linux-gnu-", "riscv64-elf-")
QEMU = "qemu-system-riscv64"
DEBIAN_PACKAGES = "gcc-riscv64-unknown-elf qemu-system-misc"


class ToolchainError(RuntimeError):
    """A required host tool is missing."""


@dataclass(frozen=True)
class Toolchain:
    prefix: str  # e.g. "riscv64-unknown-elf-"; make gets it as TOOLPREFIX (build.make_command)
    gcc: str     # absolute path of <prefix>gcc
    qemu: str    # absolute path of qemu-system-riscv64


def find_gcc(path: str | None = None) -> tuple[str, str] | None:
    """(prefix, gcc path) of the first cross compiler found on `path` (default $PATH)."""
    for prefix in GCC_PREFIXES:
        gcc = shutil.which(prefix + "gcc", path=path)
        if gcc:
            return prefix, gcc
    return None


def find_qemu(path: str | None = None) -> str:
    """Absolute path of qemu-system-riscv64 ($NEXOS_QEMU overrides), or ToolchainError naming
    the Debian package."""
    qemu = os.environ.get("NEXOS_QEMU") or shutil.which(QEMU, path=path)
    if not qemu:
        raise ToolchainError(
            f"{QEMU} not found on PATH; install it "
            "(Debian/Ubuntu: sudo apt install qemu-system-misc)")
    return qemu


def find_toolchain(path: str | None = None, need_gcc: bool = True,
                   need_qemu: bool = True) -> Toolchain:
    """Find what a command needs (building: the compiler; booting: QEMU) at once; one error
    that names every missing tool and the Debian packages that provide them."""
    gcc = find_gcc(path)
    qemu = os.environ.get("NEXOS_QEMU") or shutil.which(QEMU, path=path)
    missing, packages = [], []
    if need_gcc and gcc is None:
        missing.append("a RISC-V cross compiler (" + " or ".join(p + "gcc" for p in GCC_PREFIXES)
                       + ")")
        packages.append("gcc-riscv64-unknown-elf")
    if need_qemu and qemu is None:
        missing.append(QEMU)
        packages.append("qemu-system-misc")
    if missing:
        raise ToolchainError(
            "missing " + " and ".join(missing)
            + f"; install {'them' if len(missing) > 1 else 'it'} "
            + f"(Debian/Ubuntu: sudo apt install {' '.join(packages)})")
    prefix, gcc_path = gcc if gcc else ("", "")
    return Toolchain(prefix=prefix, gcc=gcc_path, qemu=str(qemu or ""))
