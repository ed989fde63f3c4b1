"""The KV layout's page counts in C (user/llm/kv.c, through tests/host/kvcheck.c) equal
harness/nexos/programs/kvcache.py's, geometry by geometry (docs/kvcache.md). Host-only and fast."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nexos.programs.kvcache import KvShape, active_pages_est, distinct_kv_pages, max_kv_pages

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"kv n_layers=(\d+) kv_dim=(\d+) seq_len=(\d+) rows=(\d+) max_pages=(\d+) "
                  r"region_pages=(\d+) distinct_pages=(\d+)")
# (n_layers, kv_dim, seq_len): SmolLM-135M's, regions far smaller than a page, regions of
# exactly one page and of a few pages, regions that are not a multiple of a page
GEOMETRIES = [(30, 192, 256), (1, 1, 1), (2, 10, 3), (3, 64, 5), (4, 1024, 1), (2, 512, 4),
              (5, 96, 7), (7, 300, 13), (1, 4096, 2), (9, 33, 100), (12, 192, 2048),
              (2, 1000, 9), (6, 8, 129)]


@pytest.fixture(scope="module")
def kvcheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/host's kvcheck, built for this module."""
    if shutil.which("gcc") is None:
        pytest.skip("needs the host gcc")
    out = tmp_path_factory.mktemp("kvcheck")
    p = subprocess.run(["make", "-s", "-C", str(REPO / "tests/host"), f"OUT={out}",
                        f"{out}/kvcheck"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out / "kvcheck"


def rows_of(seq_len: int) -> list[int]:
    """0, 1, seq_len, a few between, and one beyond (counted as seq_len)."""
    return sorted({0, 1, 2, seq_len // 3, seq_len // 2, seq_len - 1, seq_len, seq_len + 3})


def c_counts(kvcheck: Path, cases: list[tuple[int, int, int, int]]) -> list[tuple[int, ...]]:
    """(max_pages, region_pages, distinct_pages) for each case, from the C."""
    args = [",".join(map(str, c)) for c in cases]
    p = subprocess.run([str(kvcheck), *args], capture_output=True, text=True, check=True)
    lines = p.stdout.splitlines()
    assert len(lines) == len(cases), p.stdout
    out = []
    for case, line in zip(cases, lines, strict=True):
        m = LINE.fullmatch(line)
        assert m, line
        assert tuple(int(v) for v in m.groups()[:4]) == case
        out.append(tuple(int(v) for v in m.groups()[4:]))
    return out


def test_c_and_python_agree(kvcheck: Path) -> None:
    """Every geometry, every row count: max, per-region and distinct pages are the same."""
    cases = [(n, d, s, r) for n, d, s in GEOMETRIES for r in rows_of(s)]
    for (n, d, s, r), got in zip(cases, c_counts(kvcheck, cases), strict=True):
        shape = KvShape(n, 1, d, s)
        want = (max_kv_pages(shape), active_pages_est(shape, r), distinct_kv_pages(shape, r))
        assert got == want, (n, d, s, r)


def test_small_regions_share_pages() -> None:
    """Regions smaller than a page: the per-region count exceeds the distinct one; one row
    of SmolLM-135M touches one page per region and no page twice."""
    tiny = KvShape(2, 1, 10, 3)     # four regions of 120 bytes on one page
    assert (active_pages_est(tiny, 1), distinct_kv_pages(tiny, 1)) == (4, 1)
    smol = KvShape()
    assert active_pages_est(smol, 1) == distinct_kv_pages(smol, 1) == 60
    assert max_kv_pages(smol) == 2880


def test_rows_outside_the_reservation() -> None:
    """No rows touch nothing; more rows than seq_len count as seq_len."""
    for shape, r in itertools.product([KvShape(), KvShape(3, 1, 64, 5)], [0, -1]):
        assert active_pages_est(shape, r) == distinct_kv_pages(shape, r) == 0
    s = KvShape(3, 1, 64, 5)
    assert distinct_kv_pages(s, 99) == distinct_kv_pages(s, 5)


def test_bad_geometry(kvcheck: Path) -> None:
    """A malformed argument is one line on stderr and exit status 2."""
    p = subprocess.run([str(kvcheck), "1,2,x"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("kvcheck: bad geometry 1,2,x")
