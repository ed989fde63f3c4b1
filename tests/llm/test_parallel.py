"""smolprobe --samples N in the real kernel: parallel sampling by fork.

The parent prefills the prompt, forks N branches that share its KV cache, gives its own KV
reservation back, and releases the branches one at a time (docs/smolprobe.md). The tests
compute from the geometry which KV pages each branch writes and which of them it shares, and
check the branch's counters against it: with COW every branch but the last copies each
shared page it writes (the half-filled prompt pages), the last one reuses them; pages past
the prompt are new lazy pages; the non-KV pages it writes are the
``state_pages`` smolprobe reports. Without COW nothing is copied on a fault, and six
eager forks of a process holding the whole model do not fit the 512 MiB guest (with the
synthetic or the real model): smolprobe says so, runs the branches that forked, and no page
leaks. Branch tokens equal the numpy reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nexos.machine.config import BuildConfig
from nexos.machine.limits import PAGE_SIZE as PAGE
from nexos.machine.qemu import QemuSession
from nexos.model import generate, load_checkpoint
from nexos.parse import find_panic

PROMPT = [1, 2, 3]
TEMPERATURE = 0.8          # smolprobe's default with --samples
SEED = 7
OOM_MESSAGE = re.compile(r"\[smolprobe\] fork of branch (\d+) failed: out of memory "
                         r"\(COW_ALLOC=0 copies every page\)")


@dataclass
class Geometry:
    """KV layout of the model: 2*n_layers regions of seq_len rows of kv_dim float32."""

    n_layers: int
    kv_dim: int
    seq_len: int

    def pages(self, first: int, stop: int) -> set[int]:
        """Page numbers (from the page-aligned reservation) that rows [first, stop) of every
        region touch."""
        row, region = self.kv_dim * 4, self.seq_len * self.kv_dim * 4
        out: set[int] = set()
        for r in range(2 * self.n_layers):
            if stop > first:
                a, b = r * region + first * row, r * region + stop * row
                out.update(range(a // PAGE, (b - 1) // PAGE + 1))
        return out

    @property
    def max_pages(self) -> int:
        return -(-2 * self.n_layers * self.seq_len * self.kv_dim * 4 // PAGE)


@dataclass
class Expected:
    shared: int   # KV pages the branch writes that it inherited mapped (COW faults)
    fresh: int    # KV pages it writes that nobody had mapped (lazy faults)


def expected_kv(geo: Geometry, lazy: int, p: int, g: int) -> Expected:
    """What one branch's rows [p, p+g) hit: pages mapped at the fork (the prompt's rows when
    lazy, the whole reservation when eager) versus pages not mapped yet."""
    written = geo.pages(p, p + g)
    mapped = geo.pages(0, p) if lazy else set(range(geo.max_pages))
    return Expected(len(written & mapped), len(written - mapped))


def kv(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def lines_with(out: str, prefix: str) -> list[str]:
    return [ln.strip() for ln in out.splitlines() if ln.strip().startswith(prefix)]


def one(out: str, prefix: str) -> dict[str, str]:
    found = lines_with(out, prefix)
    assert len(found) == 1, f"want one {prefix!r} line in:\n{out}"
    return kv(found[0])


def free_pages(s: QemuSession) -> int:
    out = s.run("freecheck").output
    m = re.search(r"freecheck free_pages=(\d+)", out)
    assert m, out
    return int(m.group(1))


def model_of(build_dir: Path) -> Path:
    """The checkpoint that make put on the LLM image (build/<cfg>/model.list)."""
    return Path((build_dir / "model.list").read_text().strip())


def geometry(model: Path, seq_len: int | None = None) -> Geometry:
    c = load_checkpoint(model).config
    return Geometry(c.n_layers, c.n_kv_heads * (c.dim // c.n_heads),
                    seq_len or min(256, c.max_seq_len))


def run_samples(build_kernel, repo: Path, cfg: BuildConfig, n: int, gen: int,
                seq_len: int | None = None) -> tuple[str, int, int, Path]:
    """Boot cfg with the LLM image, run smolprobe --samples n (with --seq-len seq_len if
    given); (output, free pages before, free pages after, model path)."""
    bd = build_kernel(cfg, llm=True)
    cmd = (f"smolprobe --prompt-tokens {','.join(map(str, PROMPT))} --gen-len {gen} "
           f"--samples {n} --seed {SEED}" + (f" --seq-len {seq_len}" if seq_len else ""))
    with QemuSession.for_config(cfg, repo, llm=True) as s:
        before = free_pages(s)
        out = s.run(cmd, timeout=600).output
        after = free_pages(s)
        assert s.run("echo alive").output.strip() == "alive"
    assert find_panic(out) is None, out
    assert "usertrap" not in out, out
    return out, before, after, model_of(bd)


def check_tokens(model: Path, branches: list[dict[str, str]], gen: int) -> None:
    """Branch i's tokens are the reference's for seed SEED+i at TEMPERATURE."""
    for b in branches:
        i = int(b["index"])
        ref = generate(model, PROMPT, gen, temperature=TEMPERATURE, seed=SEED + i).tokens
        assert [int(t) for t in b["tokens"].split(",")] == ref, (i, b["tokens"], ref)


def branch_lines(out: str) -> list[dict[str, str]]:
    found = []
    for ln in lines_with(out, "[smolprobe] branch "):
        fields = kv(ln)
        fields["index"] = ln.split()[2]
        found.append(fields)
    return found


@pytest.mark.parametrize("lazy", [1, 0])
def test_cow_branches_copy_what_they_write(build_kernel, repo, lazy):
    n, gen = 3, 3
    out, before, after, model = run_samples(build_kernel, repo, BuildConfig(lazy, 1), n, gen)
    geo = geometry(model)
    exp = expected_kv(geo, lazy, len(PROMPT), gen)
    assert exp.shared > 0
    fork = one(out, "[smolprobe] fork_phase ")
    assert int(fork["branches"]) == n
    assert int(fork["prefix_kv_pages"]) == len(geo.pages(0, len(PROMPT)))
    assert fork["parent_released_kv"] == "1"
    branches = branch_lines(out)
    assert [b["index"] for b in branches] == [str(i) for i in range(n)]
    total_copies = 0
    for i, b in enumerate(branches):
        c = {k: int(v) for k, v in b.items() if k not in ("tokens", "index")}
        last = i == n - 1
        # the shared prompt pages: copied by every branch but the last, its only owner
        assert c["kv_copies"] == (0 if last else exp.shared), (i, b)
        assert c["kv_reuses"] == (exp.shared if last else 0), (i, b)
        assert c["new_kv_pages"] == (exp.fresh if lazy else 0), (i, b)
        # every page written for the first time: state pages + shared KV pages
        assert c["state_pages"] > 0
        assert c["state_copies"] + c["state_reuses"] == c["state_pages"], (i, b)
        assert c["cow_copies"] == c["state_copies"] + c["kv_copies"], (i, b)
        assert c["cow_copies"] + c["cow_reuses"] == c["state_pages"] + exp.shared, (i, b)
        total_copies += c["cow_copies"]
    summary = one(out, "[smolprobe] PARALLEL_SUMMARY ")
    parent = int(one(out, "[smolprobe] branches_phase ")["parent_copies"])
    assert int(summary["branches"]) == n
    assert int(summary["eager_copy_pages"]) == n * int(fork["parent_mapped_pages"])
    assert int(summary["actual_copied_pages"]) == total_copies + parent
    eager, actual = int(summary["eager_copy_pages"]), int(summary["actual_copied_pages"])
    assert 0 < actual < eager   # COW copies what the branches write, never all of it
    assert int(summary["saved_percent"].rstrip("%")) == 100 * (eager - actual) // eager
    assert lines_with(out, "[smolprobe] verdict=COW_STYLE ")
    assert after == before, f"free pages {before} before, {after} after"
    check_tokens(model, branches, gen)


def test_eager_fork_runs_out_of_memory_cleanly(build_kernel, repo):
    """COW_ALLOC=0 with eager sbrk: each fork copies the parent's 2048-slot KV reservation
    (90 MiB; the mapped weights are shared, not copied); six copies do not fit in 512 MiB."""
    n, gen, seq = 6, 3, 2048
    out, before, after, model = run_samples(build_kernel, repo, BuildConfig(0, 0), n, gen,
                                            seq)
    m = OOM_MESSAGE.search(out)
    assert m, out
    k = int(m.group(1))
    assert 1 <= k < n, out
    exp = expected_kv(geometry(model, seq), 0, len(PROMPT), gen)
    branches = branch_lines(out)
    assert [b["index"] for b in branches] == [str(i) for i in range(k)]
    mapped = int(one(out, "[smolprobe] fork_phase ")["parent_mapped_pages"])
    for b in branches:
        assert int(b["cow_copies"]) == int(b["cow_reuses"]) == 0, b
        assert int(b["new_kv_pages"]) == exp.fresh, b
        assert int(b["fork_pages"]) == mapped, b   # the fork copied every mapped page
    summary = one(out, "[smolprobe] PARALLEL_SUMMARY ")
    assert int(summary["branches"]) == k
    assert int(summary["saved_percent"].rstrip("%")) <= 1
    assert lines_with(out, "[smolprobe] verdict=EAGER_FORK_STYLE ")
    assert after == before, f"free pages {before} before, {after} after"
    check_tokens(model, branches, gen)
