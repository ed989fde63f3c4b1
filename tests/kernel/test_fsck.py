"""The host fsck (mkfs/fsck.c) on images the host mkfs makes: a fresh image is clean, each
kind of corruption fails with a line naming it, and a committed log is checked as boot-time
recovery would leave the image, without writing it. Boots nothing."""

from __future__ import annotations

import re
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

BSIZE = 4096
SUPER = struct.Struct("<8I")          # struct superblock
DINODE = struct.Struct("<4hQ12I")     # struct dinode: type major minor nlink size addrs[12]
DIRENT = struct.Struct("<H14s")       # struct dirent
CLEAN_RE = re.compile(r"fsck: \S+ clean: (\d+) inodes in use, (\d+) data blocks in use, "
                      r"(\d+) logged blocks replayed")


@pytest.fixture(scope="module")
def tools(repo: Path) -> tuple[Path, Path]:
    """build/host/mkfs and build/host/fsck, compiled by their make targets (host gcc only)."""
    p = subprocess.run(["make", "build/host/mkfs", "build/host/fsck"], cwd=repo,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return repo / "build/host/mkfs", repo / "build/host/fsck"


@pytest.fixture
def fresh(tools: tuple[Path, Path], tmp_path: Path) -> Path:
    """A 4 MiB image holding /a (100 bytes, inode 2) and /b (5000 bytes, inode 3)."""
    (tmp_path / "a").write_bytes(b"a" * 100)
    (tmp_path / "b").write_bytes(bytes(range(256)) * 19 + b"b" * 136)
    img = tmp_path / "fs.img"
    subprocess.run([str(tools[0]), str(img), "4", str(tmp_path / "a"), str(tmp_path / "b")],
                   check=True, capture_output=True)
    return img


def fsck(tools: tuple[Path, Path], img: Path) -> subprocess.CompletedProcess[str]:
    """build/host/fsck IMAGE, its output captured."""
    return subprocess.run([str(tools[1]), str(img)], capture_output=True, text=True,
                          timeout=60)


class Image:
    """An image's bytes in memory with its super block decoded, to corrupt and save."""

    def __init__(self, path: Path) -> None:
        self.data = bytearray(path.read_bytes())
        (self.magic, self.size, self.nblocks, self.ninodes, self.nlog, self.logstart,
         self.inodestart, self.bmapstart) = SUPER.unpack_from(self.data, BSIZE)

    def inode(self, inum: int) -> list[int]:
        """[type, major, minor, nlink, size, addrs[0], ..., addrs[11]]."""
        return list(DINODE.unpack_from(self.data, self.inodestart * BSIZE + inum * 64))

    def set_inode(self, inum: int, fields: list[int]) -> None:
        DINODE.pack_into(self.data, self.inodestart * BSIZE + inum * 64, *fields)

    def block(self, inum: int, bn: int) -> int:
        """The disk address of direct block bn of inode inum."""
        return self.inode(inum)[5 + bn]

    def set_bit(self, b: int, on: bool) -> None:
        off = self.bmapstart * BSIZE + b // 8
        self.data[off] = self.data[off] | (1 << b % 8) if on else self.data[off] & ~(1 << b % 8)

    def set_log(self, homes: list[int], copies: list[bytes]) -> None:
        """A committed log header naming homes, with copies in the log blocks after it."""
        struct.pack_into(f"<i{len(homes)}i", self.data, self.logstart * BSIZE, len(homes), *homes)
        for i, c in enumerate(copies):
            self.data[(self.logstart + 1 + i) * BSIZE:(self.logstart + 2 + i) * BSIZE] = c

    def save(self, path: Path) -> Path:
        path.write_bytes(bytes(self.data))
        return path


def test_fresh_image_is_clean(tools: tuple[Path, Path], fresh: Path) -> None:
    """An image straight from mkfs passes: exit 0 and the clean line, counting the root and
    both files, the root's block and the files' 1 + 2 blocks, and no replayed log."""
    p = fsck(tools, fresh)
    assert p.returncode == 0, p.stdout + p.stderr
    m = CLEAN_RE.fullmatch(p.stdout.strip())
    assert m, p.stdout
    assert m.groups() == ("3", "4", "0")


def _shared(im: Image) -> str:
    """Point /a's block at /b's first block."""
    f = im.inode(2)
    f[5] = im.block(3, 0)
    im.set_inode(2, f)
    return rf"block {im.block(3, 0)} referenced twice: by inode 2 and by inode 3"


def _freed(im: Image) -> str:
    im.set_bit(im.block(3, 1), False)
    return rf"block {im.block(3, 1)} \(inode 3\): referenced but marked free"


def _leak(im: Image) -> str:
    im.set_bit(im.size - 1, True)
    return rf"block {im.size - 1}: marked in use but referenced by no inode \(leak\)"


def _free_inode(im: Image) -> str:
    """Rename /a's entry (root slot 2) to name inode 100, which is free."""
    root = im.block(1, 0) * BSIZE + 2 * DIRENT.size
    DIRENT.pack_into(im.data, root, 100, b"a")
    return r"directory 1: entry 'a' names free inode 100"


def _nlink(im: Image) -> str:
    f = im.inode(3)
    f[3] = 2
    im.set_inode(3, f)
    return r"inode 3: nlink 2, but 1 links found"


def _magic(im: Image) -> str:
    struct.pack_into("<I", im.data, BSIZE, 0x12345678)
    return r"bad magic 0x12345678"


def _log_n(im: Image) -> str:
    struct.pack_into("<i", im.data, im.logstart * BSIZE, 100000)
    return rf"log header n = 100000 outside 0..{im.nlog - 1}"   # mkfs: nlog = LOGSIZE + 1


@pytest.mark.parametrize("corrupt", [_shared, _freed, _leak, _free_inode, _nlink, _magic,
                                     _log_n], ids=lambda f: f.__name__.strip("_"))
def test_corruption_is_named(tools: tuple[Path, Path], fresh: Path, tmp_path: Path,
                             corrupt: Callable[[Image], str]) -> None:
    """Each corruption of a clean image fails (exit 1) with a line naming its block or
    inode, and the last line counts the problems."""
    im = Image(fresh)
    want = corrupt(im)
    p = fsck(tools, im.save(tmp_path / "bad.img"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(rf"^fsck: {want}", p.stdout, re.M), p.stdout
    assert re.fullmatch(r"fsck: \S+: [1-9]\d* problems", p.stdout.strip().splitlines()[-1])


def test_committed_log_is_replayed(tools: tuple[Path, Path], fresh: Path,
                                   tmp_path: Path) -> None:
    """A committed log naming a data block of /b (new bytes in the log copy) is replayed:
    still clean, one logged block reported, and the image itself is left as it was."""
    im = Image(fresh)
    im.set_log([im.block(3, 1)], [b"\x5a" * BSIZE])
    img = im.save(tmp_path / "logged.img")
    before = img.read_bytes()
    p = fsck(tools, img)
    assert p.returncode == 0, p.stdout + p.stderr
    m = CLEAN_RE.fullmatch(p.stdout.strip())
    assert m and m.group(3) == "1", p.stdout
    assert img.read_bytes() == before


def test_checks_the_replayed_copy(tools: tuple[Path, Path], fresh: Path,
                                  tmp_path: Path) -> None:
    """fsck reads a logged block from the log, not its home: a log copy of the bitmap that
    frees /b's second block makes a clean image fail, and the home bitmap is untouched. When
    a block is logged twice, the last copy wins."""
    im = Image(fresh)
    bitmap = bytes(im.data[im.bmapstart * BSIZE:(im.bmapstart + 1) * BSIZE])
    im.set_bit(im.block(3, 1), False)
    freed = bytes(im.data[im.bmapstart * BSIZE:(im.bmapstart + 1) * BSIZE])
    im.set_bit(im.block(3, 1), True)
    im.set_log([im.bmapstart, im.bmapstart], [bitmap, freed])
    p = fsck(tools, im.save(tmp_path / "logged.img"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"block {im.block(3, 1)} (inode 3): referenced but marked free" in p.stdout

    im.set_log([im.bmapstart, im.bmapstart], [freed, bitmap])
    p = fsck(tools, im.save(tmp_path / "logged.img"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 logged blocks replayed" in p.stdout
