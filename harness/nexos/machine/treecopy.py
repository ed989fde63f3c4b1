"""Copy a built tree: its disk images stay sparse.

make writes fs.img and fs-llm.img as sparse files (mkfs sizes the image, then writes the
blocks it uses): 256 MiB and more each, most of it holes. A plain copy (shutil.copy2) reads
the holes as zeroes and writes every one, about 600 MiB a configuration folder and a second
of system time; copying only the data keeps the copy as small as the original. A batch grade
copies the pristine starter, builds and all, for every submission (docs/lab.md), and a
persistent session boots a copy of its image (nexos.machine.qemu.persistent_copy).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20  # bytes read and written at a time


def copy_sparse(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """shutil.copy2 (data, mode, times), but a sparse file's holes stay holes."""
    st = os.stat(src)
    if st.st_blocks * 512 >= st.st_size:   # no holes worth keeping
        return str(shutil.copy2(src, dst))
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        pos = 0
        while pos < st.st_size:
            try:
                start = os.lseek(fin.fileno(), pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                break   # only a hole is left
            pos = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            fin.seek(start)
            fout.seek(start)
            left = pos - start
            while left > 0:
                data = fin.read(min(CHUNK, left))
                if not data:
                    break
                fout.write(data)
                left -= len(data)
        fout.truncate(st.st_size)
    shutil.copystat(src, dst)
    return str(dst)


def copy_tree(src: Path, dst: Path,
              ignore: Callable[[str, list[str]], set[str]] | None = None) -> Path:
    """shutil.copytree(src, dst) with symlinks kept as links and sparse files as sparse."""
    shutil.copytree(src, dst, symlinks=True, ignore=ignore, copy_function=copy_sparse)
    return dst
