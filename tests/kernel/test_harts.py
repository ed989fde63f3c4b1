"""user/llm/harts.c, booted for real: `hartstest` on 1 and 2 harts in all four configurations
(docs/harts.md). A team of every hart splits a float matvec by rows and an integer sum by
ranges and must give exactly the one-hart result; a process forked from the team's owner
runs alone and right; a helper killed during a job ends hart 0 with one error line after its
timeout (never a hang); helpers whose hart 0 exits without harts_stop() exit by themselves;
the free pages come back after the program and no arena file is left on disk."""

from __future__ import annotations

import re

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.parse import find_panic

MATRIX = [(0, 0), (0, 1), (1, 0), (1, 1)]
OK_RE = re.compile(r"^hartstest: OK harts=(\d+) .*speedup=([\d.]+) sum_speedup=([\d.]+) "
                   r"run_us=(\d+) stop_us=(\d+) arena_kb=8$", re.M)
KILLED_RE = re.compile(r"^\[hartstest\] error: harts: a helper did not finish its part of a "
                       r"job in 300 ms \(killed\?\)$", re.M)
FREE_RE = re.compile(r"freecheck free_pages=(\d+)")


def free_pages(s: QemuSession) -> int:
    m = FREE_RE.search(s.run("freecheck").output)
    assert m, "freecheck printed no free_pages line"
    return int(m.group(1))


@pytest.mark.parametrize("cpus", [1, 2])
@pytest.mark.parametrize("lazy,cow", MATRIX, ids=[f"lazy{a}-cow{b}" for a, b in MATRIX])
def test_hartstest(build_kernel, repo, lazy, cow, cpus):
    build_kernel(BuildConfig(lazy, cow))
    with QemuSession.for_config(BuildConfig(lazy, cow, cpus=cpus), repo) as s:
        assert s.boot is not None and s.boot.cpus == cpus
        before = free_pages(s)
        r = s.run("hartstest", timeout=300)
        out = r.output
        assert find_panic(out) is None, out
        assert not r.usertraps, out   # a killed helper exits quietly; nothing faults
        ok = OK_RE.findall(out)
        assert len(ok) == 1 and int(ok[0][0]) == cpus, out
        assert len(KILLED_RE.findall(out)) == 1, out   # the killed helper's hart 0 gave up
        assert out.strip().splitlines()[-1].startswith("hartstest: OK"), out
        # every helper exited and was reaped, every arena page came back, no file is left
        assert free_pages(s) == before
        names = s.run("ls /").output.split()
        assert not [n for n in names if n.startswith("harts.")], names
        print(f"lazy={lazy} cow={cow} cpus={cpus}: speedup={ok[0][1]} "
              f"sum_speedup={ok[0][2]} run_us={ok[0][3]} stop_us={ok[0][4]}")
