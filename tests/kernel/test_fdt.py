"""kernel/fdt.c, the kernel's reader of the device tree QEMU passes at reset, compiled
unchanged on the host (tests/host/fdtcheck.c, under AddressSanitizer): on the trees QEMU's
virt machine really has (dumped by QEMU itself) it counts the harts and finds RAM, and no
cut or changed byte of such a tree makes it read past the blob or answer anything but a
count (and RAM or none). The boot line's `cpus=` and `mem=` that these answers make exact
are checked in tests/kernel/test_kernel.py and test_memory.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.qemu,  # QEMU dumps the trees
              pytest.mark.skipif(shutil.which("qemu-system-riscv64") is None,
                                 reason="needs qemu-system-riscv64")]

HARTS = (1, 2, 3, 8)
RAM = ("32M", "512M", "2048M", "4G")   # 4G: a size that needs both of reg's size cells


def dump_tree(path: Path, mem: str, harts: int) -> Path:
    """QEMU's virt device tree at path, for a machine with mem RAM (-m) and harts harts, as
    `make qemu` configures it (QEMU writes it and exits)."""
    p = subprocess.run(["qemu-system-riscv64", "-machine", f"virt,dumpdtb={path}",
                        "-bios", "none", "-m", mem, "-smp", str(harts), "-nographic"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and path.is_file(), p.stderr
    return path


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """QEMU's virt device tree for each hart count."""
    d = tmp_path_factory.mktemp("dtb")
    return {n: dump_tree(d / f"virt-smp{n}.dtb", "512M", n) for n in HARTS}


@pytest.fixture(scope="module")
def ram_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """QEMU's virt device tree for each RAM size (-m), as `make qemu MEMSIZE=` asks."""
    d = tmp_path_factory.mktemp("dtb-ram")
    return {m: dump_tree(d / f"virt-m{m}.dtb", m, 2) for m in RAM}


def fdtcheck(host_programs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(host_programs / "fdtcheck"), *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("harts", HARTS)
def test_counts_the_harts_of_qemus_tree(host_programs, trees, harts):
    p = fdtcheck(host_programs, str(trees[harts]))
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{harts}\n"


@pytest.mark.parametrize("ram", RAM)
def test_finds_the_ram_of_qemus_tree(host_programs, ram_trees, ram):
    p = fdtcheck(host_programs, "--memory", str(ram_trees[ram]))
    assert p.returncode == 0, p.stderr
    size = int(ram[:-1]) << (20 if ram.endswith("M") else 30)
    assert p.stdout == f"{0x80000000:#x} {size:#x}\n"


def patched(blob: bytes, old: bytes, new: bytes) -> bytes:
    assert blob.count(old) == 1, old
    return blob.replace(old, new)


def root_cells_at(blob: bytes, prop: bytes) -> int:
    """The offset of the value of the root's property prop (#address-cells or #size-cells,
    4 bytes): the first PROP token of length 4 with that name (the root's properties come
    before every other node's)."""
    off_struct, off_str = (int.from_bytes(blob[i:i + 4], "big") for i in (8, 12))
    nameoff = blob.index(prop + b"\0", off_str) - off_str
    token = (3).to_bytes(4, "big") + (4).to_bytes(4, "big") + nameoff.to_bytes(4, "big")
    return blob.index(token, off_struct) + len(token)


def test_ram_it_cannot_read_is_none(host_programs, ram_trees, tmp_path):
    """A tree without a memory node, or whose root says 3 address cells (past 64 bits),
    gives no RAM; the harts are still counted, since the tree itself is well formed."""
    blob = ram_trees["512M"].read_bytes()
    at = root_cells_at(blob, b"#address-cells")
    assert blob[at:at + 4] == (2).to_bytes(4, "big")
    cases = {"no-memory-node": patched(blob, b"memory@80000000\0", b"memorx@80000000\0"),
             "three-cells": blob[:at] + (3).to_bytes(4, "big") + blob[at + 4:]}
    for name, data in cases.items():
        f = tmp_path / f"{name}.dtb"
        f.write_bytes(data)
        assert fdtcheck(host_programs, "--memory", str(f)).stdout == "none\n", name
        assert fdtcheck(host_programs, str(f)).stdout == "2\n", name
    one = tmp_path / "one-cell.dtb"     # a root of 1 and 1 cells reads the reg's first two
    at_size = root_cells_at(blob, b"#size-cells")
    data = bytearray(blob)
    data[at:at + 4] = data[at_size:at_size + 4] = (1).to_bytes(4, "big")
    one.write_bytes(bytes(data))
    assert fdtcheck(host_programs, "--memory", str(one)).stdout == "0 0x80000000\n"


def test_damaged_trees_never_read_past_the_blob(host_programs, trees):
    """Every cut (the header made to agree) counts 0 and finds no RAM: the tree ends
    without FDT_END. Every single-byte change returns without AddressSanitizer finding a
    read outside the blob."""
    blob = trees[3].read_bytes()
    total = int.from_bytes(blob[4:8], "big")
    end_struct = int.from_bytes(blob[8:12], "big") + int.from_bytes(blob[36:40], "big")
    p = fdtcheck(host_programs, "--damage", str(trees[3]))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == f"cuts={end_struct} cut_nonzero=0 cut_memory=0 changes={4 * total}\n"


def test_garbage_is_no_tree(host_programs, tmp_path):
    for name, data in {"empty": b"", "zeros": bytes(64), "text": b"not a device tree" * 4,
                       "bad-size": bytes.fromhex("d00dfeed") + b"\xff" * 60}.items():
        f = tmp_path / name
        f.write_bytes(data)
        p = fdtcheck(host_programs, str(f))
        assert (p.returncode, p.stdout) == (0, "0\n"), (name, p.stderr)
        p = fdtcheck(host_programs, "--memory", str(f))
        assert (p.returncode, p.stdout) == (0, "none\n"), (name, p.stderr)
