"""Lazy allocation, copy-on-write and mmap in all four configurations, booted for real: the
test programs pass (each checks exact page counts with memstat and, where its feature is off,
the fallback behaviour), the kernel never panics, and free pages return to their baseline."""

from __future__ import annotations

import re

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import find_panic
from support import SMALL_MEMSIZE

MATRIX = [(0, 0), (0, 1), (1, 0), (1, 1)]
# The programs size their memory-filling tests from memstat (a share of total_pages), so
# the small guest runs every check with an eighth of the pages of the default 512 MiB to
# fill (docs/testing.md, "Keeping it fast").
MEMSIZE = SMALL_MEMSIZE
FREE_RE = re.compile(r"freecheck free_pages=(\d+) total_pages=(\d+) lazy_alloc=(\d) cow_alloc=(\d)")


def free_pages(s: QemuSession, lazy: int, cow: int) -> int:
    """The allocator's free pages, from `freecheck`; also checks the reported configuration."""
    m = FREE_RE.search(s.run("freecheck").output)
    assert m, "freecheck printed no free_pages line"
    assert (int(m[3]), int(m[4])) == (lazy, cow)
    return int(m[1])


def verdict(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.mark.long
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=[f"lazy{a}-cow{b}" for a, b in MATRIX])
def test_memory_programs(build_kernel, repo, lazy, cow):
    cfg = BuildConfig(lazy, cow, memsize=MEMSIZE, cpus=2)
    build_kernel(BuildConfig(lazy, cow, memsize=MEMSIZE))
    failures = []
    with QemuSession.for_config(cfg, repo) as s:
        baseline = free_pages(s, lazy, cow)
        for cmd, limit in (("lazytests", 600), ("cowtests", 600), ("mmaptests", 600),
                           ("usertests", 1800), ("usertests sbrklazy", 300),
                           ("stress -n 300 -t 60 -s 7", 300)):
            out = s.run(cmd, timeout=limit).output
            assert find_panic(out) is None, f"{cmd}: kernel panic\n{out[-3000:]}"
            if verdict(out) != "ALL TESTS PASSED":
                failures.append(f"{cmd}:\n{out[-2000:]}")
            after = free_pages(s, lazy, cow)
            if after != baseline:
                failures.append(f"{cmd}: free pages {baseline} before, {after} after (leak)")
    assert not failures, "\n\n".join(failures)
