"""The file system's size and crash promises (docs/filesystem.md): a file of MAXFILE blocks
fits the default image in each flag's two policies, and a machine killed in the middle of
writing leaves an image that the host's fsck accepts and the kernel boots and uses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession, QemuTimeout, persistent_copy
from nexos.parse import find_panic


def fsck(repo: Path, image: Path) -> subprocess.CompletedProcess[str]:
    """The host's fsck over image (build/host/fsck, made on demand: it is no part of `all`)."""
    subprocess.run(["make", "-s", "build/host/fsck"], cwd=repo, check=True,
                   capture_output=True)
    return subprocess.run([str(repo / "build/host/fsck"), str(image)], capture_output=True,
                          text=True)


def assert_clean(repo: Path, image: Path, when: str) -> str:
    r = fsck(repo, image)
    assert r.returncode == 0 and " clean: " in r.stdout.splitlines()[-1], (
        f"fsck after {when}:\n{r.stdout[-3000:]}{r.stderr[-1000:]}")
    return r.stdout


# The file system has no flag of its own; the flags change only how the user buffer of each
# write is mapped (lazily or not, shared or not), so the two corners hold each flag's two
# policies.
CORNERS = [BuildConfig(0, 0), BuildConfig(1, 1)]


@pytest.mark.parametrize("cfg", CORNERS, ids=lambda c: c.name)
def test_usertests_maxfile(build_kernel, repo, tmp_path, cfg: BuildConfig):
    """usertests maxfile: MAXFILE blocks written one block per call (MIT's writebig pattern)
    fit the default image, a write past MAXFILE fails, every block reads back, and the file
    is removed; afterwards fsck finds every block it took free again in the bitmap (a block
    marked in use that no inode owns is a leak)."""
    bd = build_kernel(cfg)
    image = persistent_copy(bd / "fs.img", tmp_path / "fs.img")
    with QemuSession(bd / "kernel", image, cfg, snapshot=False) as s:
        out = s.run("usertests maxfile", timeout=900).output
    assert find_panic(out) is None, out[-3000:]
    assert "test maxfile: OK" in out and out.rstrip().endswith("ALL TESTS PASSED"), out[-3000:]
    assert_clean(repo, image, "usertests maxfile")


def crash_sizes(ls_output: str) -> list[int]:
    """The size of crash.bin from `ls crash.bin` (name type inum size), if it exists."""
    words = ls_output.split()
    return [int(words[3])] if len(words) >= 4 and words[0] == "crash.bin" else []


# Seconds after which QEMU is killed while a program writes crash.bin, and the program:
# `mkbig` (64 KiB writes, the direct path's) early (the first commits), in the middle and
# late, so that the kill falls in different phases of commits; then `writebench` with one
# block per call, whose appends are gathered in memory before they get disk blocks. A fast
# host may finish a file first; the test asks that some kill of each kind fell mid-write.
CRASH_MIB = 128
MKBIG = f"mkbig crash.bin {CRASH_MIB} 5"
ONE_BLOCK = f"writebench crash.bin {CRASH_MIB} 4"
KILLS = ((0.3, MKBIG), (0.8, MKBIG), (1.3, MKBIG), (1.5, ONE_BLOCK))


def test_a_machine_killed_mid_write_leaves_a_consistent_disk(build_kernel, repo, tmp_path):
    """QEMU killed while a program writes a big file, four times over on one image: after
    each kill the host's fsck (replaying a committed log as the kernel's recovery would)
    finds no block owned twice and the bitmap agrees with the inodes; the kernel then boots
    it, a file written before the crash (its program had exited) reads back whole, and the
    disk is usable (a new file written, read back and removed). A commit is all or nothing,
    and appends gathered in memory when the machine died are simply not in the file."""
    cfg = BuildConfig(1, 1)
    bd = build_kernel(cfg)
    image = persistent_copy(bd / "fs.img", tmp_path / "fs.img")
    assert_clean(repo, image, "mkfs")
    with QemuSession(bd / "kernel", image, cfg, snapshot=False) as s:
        out = s.run("mkbig before.bin 4 3", timeout=300).output
        assert "wrote 4194304 bytes" in out, out
    before, partial = None, {MKBIG: [], ONE_BLOCK: []}

    def check_before(s: QemuSession, killed: str) -> None:
        """before.bin unchanged, and the size of the crash.bin that `killed` left."""
        nonlocal before
        out = s.run("cksum before.bin", timeout=120).output
        assert find_panic(out) is None, out
        before = before or out.split()[1]
        assert out.split()[1] == before, f"before.bin changed by a kill in `{killed}`: {out}"
        if killed:
            partial[killed] += crash_sizes(s.run("ls crash.bin", timeout=120).output)

    killed = ""
    for after, cmd in KILLS:
        with QemuSession(bd / "kernel", image, cfg, snapshot=False) as s:
            check_before(s, killed)
            s.run("rm crash.bin", timeout=120)
            try:
                s.run(cmd, timeout=after)
            except QemuTimeout:
                pass   # killed mid-write (the session is closed)
        killed = cmd
        assert_clean(repo, image, f"a kill {after} s into `{cmd}`")
    with QemuSession(bd / "kernel", image, cfg, snapshot=False) as s:
        check_before(s, killed)
        # Some kill of each kind fell in the middle of the write: the file it left is a
        # part of it.
        assert any(0 < n < CRASH_MIB << 20 for n in partial[MKBIG]), partial
        assert any(0 < n < CRASH_MIB << 20 for n in partial[ONE_BLOCK]), partial
        out = s.run("mkbig after.bin 8 9", timeout=300).output
        assert "wrote 8388608 bytes" in out, out
        out = s.run("usertests -q", timeout=600).output
        assert find_panic(out) is None and out.rstrip().endswith("ALL TESTS PASSED"), out
    assert_clean(repo, image, "the reboot that used the disk")
