"""lazytests' edge cases of copyin/copyout/copyinstr, pipes, exec and sbrk on heap pages
nobody touched (docs/testing.md, "lazytests"), one by name, in all four configurations,
without and with swap: each passes, frees what it used, and only `shrinkbelow` provokes
faults (its two stores above the new break, which must kill). Then `oomcrowd`: the OOM
killer takes hogs, never the small process, when a crowd faults out of memory at once."""

from __future__ import annotations

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import find_panic
from support import SMALL_MEMSIZE, SMALL_SWAPSIZE

MATRIX = [(0, 0), (0, 1), (1, 0), (1, 1)]
MEMSIZE, SWAPSIZE = SMALL_MEMSIZE, SMALL_SWAPSIZE   # one build with test_memory, test_swap
# name -> the kernel's `usertrap:` reports the test provokes on purpose
EDGE_CASES = {"spanrw": 0, "pathstr": 0, "pipeheap": 0, "execempty": 0, "shrinkbelow": 2}


@pytest.mark.parametrize("swapsize", [0, SWAPSIZE], ids=["noswap", "swap"])
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=[f"lazy{a}-cow{b}" for a, b in MATRIX])
def test_lazytests_edge_cases(build_kernel, repo, lazy, cow, swapsize):
    build_kernel(BuildConfig(lazy, cow, memsize=MEMSIZE))
    cfg = BuildConfig(lazy, cow, memsize=MEMSIZE, swapsize=swapsize)
    with QemuSession.for_config(cfg, repo, lifetime=900) as s:
        assert s.boot is not None and s.boot.line.endswith(f"swap={swapsize}M")
        for name, traps in EDGE_CASES.items():
            r = s.run(f"lazytests {name}", timeout=300)
            lines = [ln.strip() for ln in r.output.splitlines() if ln.strip()]
            assert find_panic(r.output) is None, r.output
            assert f"test {name}: OK" in lines, r.output
            assert "test leakcheck: OK" in lines, r.output
            assert lines[-1] == "ALL TESTS PASSED", r.output
            assert len(r.usertraps) == traps, r.output
        # oomcrowd runs only by name (it fills RAM twice): a crowd out of memory at once
        r = s.run("lazytests oomcrowd", timeout=600)
        lines = [ln.strip() for ln in r.output.splitlines() if ln.strip()]
        assert find_panic(r.output) is None, r.output
        assert "test oomcrowd: OK" in lines and lines[-1] == "ALL TESTS PASSED", r.output
        if lazy and not swapsize:
            assert r.usertraps, r.output   # some hogs must die (the test saw which)
        elif swapsize:
            assert not r.usertraps, r.output   # swap has room for the whole crowd
