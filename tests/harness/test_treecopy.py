"""nexos.machine.treecopy: a built tree's copy keeps its disk images sparse, and everything
else as shutil.copytree would (data, modes, times, symlinks as links)."""

from __future__ import annotations

import os
from pathlib import Path

from nexos.machine.treecopy import copy_sparse, copy_tree

MIB = 1 << 20


def sparse_image(path: Path) -> dict[int, bytes]:
    """A 64 MiB file that is holes but for three runs of data (one at the very end); the
    runs by offset."""
    runs = {0: b"boot" * 1024, 17 * MIB + 5: os.urandom(3 * MIB), 64 * MIB - 4096: b"z" * 4096}
    with open(path, "wb") as f:
        f.truncate(64 * MIB)
        for off, data in runs.items():
            f.seek(off)
            f.write(data)
    return runs


def test_a_sparse_image_is_copied_whole_and_stays_sparse(tmp_path: Path) -> None:
    src, dst = tmp_path / "fs.img", tmp_path / "copy.img"
    sparse_image(src)
    os.utime(src, ns=(1_000_000_000, 2_000_000_000))
    os.chmod(src, 0o640)
    copy_sparse(src, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert dst.stat().st_blocks <= src.stat().st_blocks + 16   # not 64 MiB of zeroes
    assert dst.stat().st_mtime_ns == 2_000_000_000 and dst.stat().st_mode & 0o777 == 0o640


def test_a_file_ending_in_a_hole_keeps_its_length(tmp_path: Path) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    with open(src, "wb") as f:
        f.write(b"x" * 10)
        f.truncate(8 * MIB)
    copy_sparse(src, dst)
    assert dst.stat().st_size == 8 * MIB and dst.read_bytes() == src.read_bytes()


def test_a_tree_keeps_links_and_small_files(tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "build" / "cfg").mkdir(parents=True)
    (src / "Makefile").write_text("all:\n")
    sparse_image(src / "build" / "cfg" / "fs.img")
    (src / "build" / "assets").symlink_to("/nonexistent/assets")
    (src / ".venv").mkdir()
    dst = copy_tree(src, tmp_path / "copy",
                    lambda folder, names: {n for n in names if n == ".venv"})
    assert (dst / "Makefile").read_text() == "all:\n"
    assert os.readlink(dst / "build" / "assets") == "/nonexistent/assets"
    assert not (dst / ".venv").exists()
    img = dst / "build" / "cfg" / "fs.img"
    assert img.read_bytes() == (src / "build" / "cfg" / "fs.img").read_bytes()
    assert img.stat().st_blocks * 512 < 8 * MIB
