"""The kernel foundation, booted for real in QEMU: boot line, usertests on 1 and 3 harts,
per-process floating point, a file crossing every block-map level, persistence across a
reboot, and bad system-call arguments."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fnv import fnv_file, mkbig_bytes, parse_cksum
from nexos.machine.config import BuildConfig
from nexos.machine.limits import MAX_MEMSIZE, MIN_MEMSIZE
from nexos.machine.qemu import QemuSession, persistent_copy
from nexos.parse import find_panic

EAGER = BuildConfig(0, 0)


def passed(output: str) -> bool:
    """A test program's verdict: its last line says ALL TESTS PASSED."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return bool(lines) and lines[-1] == "ALL TESTS PASSED"


@pytest.mark.parametrize("lazy,cow,cpus", [(0, 0, 1), (1, 1, 3), (1, 1, 8)])
def test_boot_line_is_true(build_kernel, repo, lazy, cow, cpus):
    """cpus= counts the harts QEMU was given (the device tree's, kernel/fdt.c), up to
    NCPU = 8: hart 0 waits for each before it prints the line."""
    cfg = BuildConfig(lazy, cow, cpus=cpus)
    build_kernel(BuildConfig(lazy, cow))
    with QemuSession.for_config(cfg, repo) as s:
        assert s.boot is not None
        assert (s.boot.lazy, s.boot.cow, s.boot.cpus, s.boot.mem) == (lazy, cow, cpus, 512)
        out = s.run("echo hello nexos").output
        assert out.strip() == "hello nexos"


@pytest.mark.parametrize("mem", [MIN_MEMSIZE, 100, MAX_MEMSIZE])
def test_one_build_boots_every_ram_size(build_kernel, repo, mem):
    """The kernel reads its RAM from the device tree (kernel/fdt.c): one build boots at the
    smallest and largest size and in between, says so in its boot line and in memstat, and
    sbrk's growth to its bound and back (past 2 GiB of heap at 2 GiB of RAM) gives every
    page back."""
    build_kernel(BuildConfig(1, 1))
    with QemuSession.for_config(BuildConfig(1, 1, memsize=mem), repo) as s:
        assert s.boot is not None and s.boot.mem == mem
        stat = s.run("freecheck").output
        out = s.run("usertests sbrkbound", timeout=300).output
    assert f" mem={mem}" in stat, stat
    # RAM's pages less the kernel image (about 2 MiB) and the tables carved by RAM's size
    # (18 bytes a page: kcarve in kernel/kalloc.c)
    missing = mem * 256 - int(re.search(r"total_pages=(\d+)", stat)[1])
    assert 0 < missing < 1024 + mem * 256 * 18 // 4096 + 2, stat
    assert find_panic(out) is None and passed(out), out[-3000:]


@pytest.mark.parametrize("cpus", [1, 3])
def test_usertests_quick(build_kernel, repo, cpus):
    build_kernel(EAGER)
    with QemuSession.for_config(BuildConfig(0, 0, cpus=cpus), repo) as s:
        out = s.run("usertests -q", timeout=600).output
    assert find_panic(out) is None
    assert passed(out), out[-3000:]


def test_two_processes_float_exact(build_kernel, repo):
    build_kernel(EAGER)
    with QemuSession.for_config(BuildConfig(0, 0, cpus=2), repo) as s:
        out = s.run("fptest", timeout=300).output
    assert passed(out), out[-3000:]


def _image_with(repo: Path, build_dir: Path, dest: Path, size_mib: int,
                extra: list[str]) -> Path:
    """An image with the configuration's programs plus `extra` (name=path) files."""
    progs = sorted(str(p) for p in (build_dir / "user").glob("_*"))
    subprocess.run([str(repo / "build/host/mkfs"), str(dest), str(size_mib), *progs, *extra],
                   check=True, capture_output=True)
    return dest


def test_big_file_from_mkfs_reads_back(build_kernel, repo, tmp_path):
    """A 150 MiB file (direct, single- and double-indirect blocks; just under MAXFILE, 160
    MiB) put on the image by mkfs has the same checksum in the guest as on the host."""
    bd = build_kernel(EAGER)
    big = tmp_path / "big.bin"
    rng = __import__("numpy").random.default_rng(2026)
    with big.open("wb") as f:
        for _ in range(150 // 4):
            f.write(rng.integers(0, 256, 4 << 20, dtype="uint8").tobytes())
        f.write(b"tail: not a whole word")
    image = _image_with(repo, bd, tmp_path / "big.img", 190, [f"big.bin={big}"])
    with QemuSession(bd / "kernel", image, EAGER) as s:
        out = s.run("cksum big.bin", timeout=600).output
    digest, size = parse_cksum(out)
    assert size == big.stat().st_size
    assert digest == fnv_file(big, tmp_path)


def test_file_written_in_guest_survives_reboot(build_kernel, repo, tmp_path):
    bd = build_kernel(EAGER)
    image = persistent_copy(bd / "fs.img", tmp_path / "fs.img")
    with QemuSession(bd / "kernel", image, EAGER, snapshot=False) as s:
        out = s.run("mkbig persist.bin 32 7", timeout=300).output
        assert "wrote 33554432 bytes" in out, out
        s.reboot()
        out = s.run("cksum persist.bin", timeout=300).output
    expected = tmp_path / "expected.bin"
    expected.write_bytes(mkbig_bytes(32, 7))
    assert parse_cksum(out) == (fnv_file(expected, tmp_path), 32 << 20)


@pytest.mark.parametrize("cfg", [BuildConfig(lz, cw) for lz in (0, 1) for cw in (0, 1)],
                         ids=lambda c: c.name)
def test_shared_mapping_write_back_survives_reboot(build_kernel, tmp_path, cfg):
    """Stores through a MAP_SHARED mapping reach the disk: written back at munmap, through
    the log, they are in the file after a reboot of the same image (eager and lazy mmap,
    COW on and off)."""
    bd = build_kernel(cfg)
    image = persistent_copy(bd / "fs.img", tmp_path / "fs.img")
    with QemuSession(bd / "kernel", image, cfg, snapshot=False) as s:
        s.run("mkbig mapped.bin 1 7", timeout=120)
        out = s.run("mapwrite mapped.bin 8190 hello-across-pages", timeout=60).output
        assert "mapwrite: 18 bytes at 8190 of mapped.bin" in out, out
        out = s.run("mapwrite mapped.bin 0 x", timeout=60).output
        assert "mapwrite: 1 bytes at 0 of mapped.bin" in out, out
        s.reboot()
        out = s.run("cksum mapped.bin", timeout=120).output
    expected = bytearray(mkbig_bytes(1, 7))
    expected[8190:8190 + 18] = b"hello-across-pages"
    expected[0:1] = b"x"
    (tmp_path / "expected.bin").write_bytes(bytes(expected))
    assert parse_cksum(out) == (fnv_file(tmp_path / "expected.bin", tmp_path), 1 << 20)


def test_mapwrite_errors_are_one_line(build_kernel, repo):
    build_kernel(EAGER)
    with QemuSession.for_config(EAGER, repo) as s:
        s.run("echo abc > small.txt")
        for cmd, why in (("mapwrite small.txt 2 toolong", "end within the file"),
                         ("mapwrite nope.txt 0 x", "cannot open it for writing"),
                         ("mapwrite small.txt x1 y", "OFFSET must be a number"),
                         ("mapwrite / 0 x", "cannot open it for writing")):
            out = s.run(cmd, timeout=60).output
            assert why in out and "panic" not in out, (cmd, out)
        assert s.run("cat small.txt").output.strip().endswith("abc")


def test_bad_arguments_fail_without_panic(build_kernel, repo):
    build_kernel(EAGER)
    with QemuSession.for_config(EAGER, repo) as s:
        s.run("echo this is not an elf file > notelf")
        out = s.run("notelf").output
        assert "exec notelf failed" in out
        out = s.run("cat no-such-file").output
        assert find_panic(out) is None and "cat" in out
        for name in ("badptr", "badfd", "execbad", "badaccess"):
            out = s.run(f"usertests {name}", timeout=300).output
            assert passed(out), out[-3000:]
        # the kernel is still alive and serving commands
        assert s.run("echo still here").output.strip() == "still here"
