"""Figures (matplotlib, PNG): KV pages mapped per generated token; saved fraction vs seq_len."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)

from nexos.parse import TraceStep  # noqa: E402


def plot_trace(series: dict[str, list[TraceStep]], out: Path, max_pages: int | None = None
               ) -> Path:
    """Mapped KV pages against generated tokens, one line per configuration label."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, steps in series.items():
        ax.plot([s.step for s in steps], [s.kv_mapped_pages for s in steps], marker=".",
                label=label)
    if max_pages:
        ax.axhline(max_pages, linestyle="--", color="grey", label=f"max_kv_pages={max_pages}")
    ax.set_xlabel("decode step (generated tokens)")
    ax.set_ylabel("mapped KV-cache pages")
    ax.set_title("smolprobe: KV pages mapped, eager vs lazy sbrk")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)


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
    ax.set_xlabel("runtime seq_len (tokens reserved)")
    ax.set_ylabel("saved KV pages (%)")
    ax.set_ylim(0, 100)
    ax.set_title("smolprobe: pages saved by lazy allocation vs reservation size")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)
