"""kernel/fdt.c, the kernel's reader of the device tree QEMU passes at reset, compiled
unchanged on the host (tests/host/fdtcheck.c, under AddressSanitizer): on the trees QEMU's
virt machine really has (dumped by QEMU itself) it counts the harts, and no cut or changed
byte of such a tree makes it read past the blob or answer anything but a count. The boot
line's `cpus=` that this count makes exact is checked in tests/kernel/test_kernel.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.qemu,  # QEMU dumps the trees
              pytest.mark.skipif(shutil.which("qemu-system-riscv64") is None,
                                 reason="needs qemu-system-riscv64")]

HARTS = (1, 2, 3, 8)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """QEMU's virt device tree for each hart count, as `make qemu` configures the machine."""
    d = tmp_path_factory.mktemp("dtb")
    out = {}
    for n in HARTS:
        out[n] = d / f"virt-smp{n}.dtb"
        p = subprocess.run(["qemu-system-riscv64", "-machine", f"virt,dumpdtb={out[n]}",
                            "-bios", "none", "-m", "512M", "-smp", str(n), "-nographic"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and out[n].is_file(), p.stderr
    return out


def fdtcheck(host_programs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(host_programs / "fdtcheck"), *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("harts", HARTS)
def test_counts_the_harts_of_qemus_tree(host_programs, trees, harts):
    p = fdtcheck(host_programs, str(trees[harts]))
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{harts}\n"


def test_damaged_trees_never_read_past_the_blob(host_programs, trees):
    """Every cut (the header made to agree) counts 0: the tree ends without FDT_END. Every
    single-byte change returns without AddressSanitizer finding a read outside the blob."""
    blob = trees[3].read_bytes()
    total = int.from_bytes(blob[4:8], "big")
    end_struct = int.from_bytes(blob[8:12], "big") + int.from_bytes(blob[36:40], "big")
    p = fdtcheck(host_programs, "--damage", str(trees[3]))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == f"cuts={end_struct} cut_nonzero=0 changes={4 * total}\n"


def test_garbage_is_no_tree(host_programs, tmp_path):
    for name, data in {"empty": b"", "zeros": bytes(64), "text": b"not a device tree" * 4,
                       "bad-size": bytes.fromhex("d00dfeed") + b"\xff" * 60}.items():
        f = tmp_path / name
        f.write_bytes(data)
        p = fdtcheck(host_programs, str(f))
        assert (p.returncode, p.stdout) == (0, "0\n"), (name, p.stderr)
