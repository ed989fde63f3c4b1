"""Figures (matplotlib, PNG): KV pages mapped per token, saved fraction vs seq_len, and the
physical pages that parallel-sampling branches cost against their number (COW vs copying)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nexos.parse import TraceStep  # noqa: E402


def _finish(fig: Figure, ax: Axes, out: Path) -> Path:
    """Legend, grid, layout; write the PNG to out and free the figure."""
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)


def plot_trace(series: dict[str, list[TraceStep]], out: Path, max_pages: int | None = None
               ) -> Path:
    """Mapped KV pages against generated tokens, one line per configuration label."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, steps in series.items():
        ax.step([s.pos + 1 for s in steps], [s.kv_mapped_pages for s in steps], where="post",
                marker=".", label=label)
    if max_pages:
        ax.axhline(max_pages, linestyle="--", color="grey", label=f"max_kv_pages={max_pages}")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens in the KV cache (prompt + generated)")
    ax.set_ylabel("mapped KV-cache pages")
    ax.set_title("smolprobe: KV pages mapped, eager vs lazy sbrk")
    return _finish(fig, ax, out)


def plot_saved(points: list[tuple[int, float, float | None]], out: Path) -> Path:
    """Saved fraction against seq_len: (seq_len, measured %, formula % or None) tuples."""
    points = sorted(points)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="measured (lazy)")
    formula = [(p[0], p[2]) for p in points if p[2] is not None]
    if formula:
        ax.plot([p[0] for p in formula], [p[1] for p in formula], linestyle="--",
                label="1 - active_pages_est/max_kv_pages")
    ax.set_xscale("log", base=2)
    ax.set_xticks([p[0] for p in points], [str(p[0]) for p in points])
    ax.minorticks_off()
    ax.set_xlabel("runtime seq_len (tokens reserved)")
    ax.set_ylabel("saved KV pages (%)")
    ax.set_ylim(0, 100)
    ax.set_title("smolprobe: pages saved by lazy allocation vs reservation size")
    return _finish(fig, ax, out)


def plot_branches(series: dict[str, list[tuple[int, int]]], out: Path) -> Path:
    """Physical pages the branches cost against the number of branches: one line per label,
    (branches, pages) points (e.g. copied pages on a COW kernel, on a copying kernel, and
    what an eager fork would copy)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in series.items():
        pts = sorted(pts)
        if "would" in label:  # the computed reference: grey, dashed, behind the measurements
            kw: dict[str, object] = {"linestyle": "--", "color": "grey", "zorder": 1}
        else:
            kw = {"marker": "o", "zorder": 2}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **kw)
    ax.set_xlabel("branches (smolprobe --samples N)")
    ax.set_ylabel("physical pages copied for the branches")
    ax.set_yscale("symlog", linthresh=100)
    ax.set_title("parallel sampling by fork: copy-on-write vs copying fork")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _finish(fig, ax, out)
