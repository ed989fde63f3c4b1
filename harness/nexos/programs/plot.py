"""Figures (matplotlib, PNG): KV pages mapped per token, saved fraction vs seq_len, and the
physical pages that parallel-sampling branches cost against their number (COW vs copying).

`PlotPlan` says which smolprobe runs the figures need; `write_plots` draws them from the
runs. matplotlib loads slowly: the command line imports this module only for `nexos plot`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nexos.machine.config import BuildConfig  # noqa: E402
from nexos.machine.limits import PAGE_SIZE, SMOLPROBE_SEQ_LEN  # noqa: E402
from nexos.parse import TraceStep  # noqa: E402
from nexos.programs.compare import Probe, ProbeRun  # noqa: E402
from nexos.programs.serve import concurrency  # noqa: E402
from nexos.records import (
    BRANCH_GEN_LEN,  # noqa: E402
    ProbeRequest,  # noqa: E402
    ServeRecord,  # noqa: E402
)

EAGER, LAZY, COW = BuildConfig(0, 0), BuildConfig(1, 0), BuildConfig(1, 1)


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
    ax.set_xlabel("branches that ran (smolprobe --samples N)")
    ax.set_ylabel("physical pages copied for the branches")
    ax.set_yscale("symlog", linthresh=100)
    ax.set_title("parallel sampling by fork: copy-on-write vs copying fork")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _finish(fig, ax, out)


@dataclass(frozen=True)
class PlotPlan:
    """The figures `nexos plot` draws: the trace of `gen_len` tokens after `prompt` (eager
    and lazy), the saved fraction at each of `seq_lens` (lazy; none: no figure), and the
    pages copied for each of `branches` --samples values (COW on and off; none: no figure),
    each branch generating `branch_gen_len` tokens. A branch makes all its copies at its
    first writes (records.BRANCH_GEN_LEN), so a few tokens measure what forty would."""

    prompt: tuple[int, ...]
    gen_len: int
    seq_lens: tuple[int, ...]
    branches: tuple[int, ...]
    serve_args: tuple[str, ...] = ()   # smolserve's flags for the serving figure (): none
    branch_gen_len: int = BRANCH_GEN_LEN

    def serve_configs(self) -> list[tuple[int, int]]:
        """(lazy, cow) of the smolserve runs of the serving figure: all four, eager first."""
        return [(0, 0), (0, 1), (1, 0), (1, 1)] if self.serve_args else []

    def trace_request(self) -> ProbeRequest:
        return ProbeRequest(self.prompt, self.gen_len, trace=True)

    def saved_requests(self) -> list[ProbeRequest]:
        """One request per seq_len; the generated tokens are cut to fit the reservation."""
        return [ProbeRequest(self.prompt, min(self.gen_len, max(n - len(self.prompt), 0)),
                             seq_len=n) for n in self.seq_lens]

    def is_trace_run(self, req: ProbeRequest) -> bool:
        """Whether saved-fraction request req is what the lazy trace run already ran: the
        same tokens in a reservation of smolprobe's default seq_len (--trace only adds the
        per-token lines). Its point is read from that run instead of running it again."""
        return req == replace(self.trace_request(), trace=False, seq_len=SMOLPROBE_SEQ_LEN)

    def probes(self) -> list[Probe]:
        """Every run the figures need, in the order write_plots expects the runs: each
        one once (a saved-fraction point the lazy trace run gives is not run again)."""
        trace = self.trace_request()
        probes: list[Probe] = [(EAGER, trace), (LAZY, trace)]
        probes += [(LAZY, req) for req in self.saved_requests() if not self.is_trace_run(req)]
        for n in self.branches:
            samples = ProbeRequest(self.prompt, self.branch_gen_len, samples=n)
            probes += [(COW, samples), (LAZY, samples)]
        return probes

    def configs(self) -> list[BuildConfig]:
        return list(dict.fromkeys(c for c, _ in self.probes()))


def write_plots(plan: PlotPlan, runs: list[ProbeRun], out_dir: Path) -> list[Path]:
    """Draw plan's figures into out_dir from the runs of plan.probes() (in that order); the
    PNGs written. ProbeFailed when a run has no usable result."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_runs, rest = runs[:2], iter(runs[2:])
    saved_runs = [trace_runs[1] if plan.is_trace_run(req) else next(rest)
                  for req in plan.saved_requests()]
    branch_runs = list(rest)
    series = {f"{x.config.label} ({x.config.name})": x.usable("trace", lambda r: r.trace).trace
              for x in trace_runs}
    written = [plot_trace(series, out_dir / "kv_pages_vs_tokens.png",
                          plan.trace_request().expected()[0])]
    if plan.seq_lens:
        points: list[tuple[int, float, float | None]] = []
        for req, x in zip(plan.saved_requests(), saved_runs):
            summary = x.usable("SUMMARY", lambda r: r.summary).summary
            assert summary is not None and req.seq_len is not None
            mx, active = req.expected()
            points.append((req.seq_len, float(summary.saved_percent), 100.0 * (mx - active) / mx))
        written.append(plot_saved(points, out_dir / "saved_vs_seq_len.png"))
    if plan.branches:
        copied: dict[str, list[tuple[int, int]]] = {}
        for x in branch_runs:
            p = x.usable("PARALLEL_SUMMARY", lambda r: r.parallel).parallel
            assert p is not None
            # at the branches that ran: a copying fork may run out of memory before N
            label = f"{'COW' if x.config.cow else 'copying'} fork ({x.config.name})"
            copied.setdefault(label + ": pages copied", []).append(
                (p.branches, p.actual_copied_pages))
            if x.config.cow:
                copied.setdefault("an eager fork would copy", []).append(
                    (p.branches, p.eager_copy_pages))
        written.append(plot_branches({k: sorted(dict(v).items()) for k, v in copied.items()},
                                     out_dir / "pages_vs_branches.png"))
    return written


def plot_serve(series: dict[str, list[tuple[float, int, int]]], out: Path) -> Path:
    """Two panels against time: requests running at once, and memory in use (MiB), one
    line per configuration label; points are (seconds, running, pages in use)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for label, pts in series.items():
        ts = [p[0] for p in pts]
        top.step(ts, [p[1] for p in pts], where="post", label=label)
        bottom.step(ts, [p[2] * PAGE_SIZE / 2**20 for p in pts], where="post", label=label)
    top.set_ylabel("requests running at once")
    top.set_ylim(bottom=0)
    top.yaxis.get_major_locator().set_params(integer=True)
    top.set_title("smolserve: requests at once and memory in use\n"
                  "eager vs lazy sbrk, copying vs copy-on-write fork", fontsize=11)
    top.legend(fontsize=9)
    top.grid(alpha=0.3)
    bottom.set_xlabel("seconds since the server's baseline")
    bottom.set_ylabel("memory in use (MiB, whole system)")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)


def write_serve_plot(records: list[ServeRecord], out_dir: Path) -> Path:
    """The serving figure from the runs of plan.serve_configs(); ValueError naming a run
    without a usable result."""
    series: dict[str, list[tuple[float, int, int]]] = {}
    for rec in records:
        if rec.failed or rec.result is None:
            why = rec.problem or (rec.result.error if rec.result else None)
            raise ValueError(f"smolserve on {rec.config} gave no result: {why}")
        label = f"{'lazy' if rec.lazy else 'eager'} sbrk, COW {'on' if rec.cow else 'off'}"
        series[f"{label} ({rec.config})"] = concurrency(rec.result)
    out_dir.mkdir(parents=True, exist_ok=True)
    return plot_serve(series, out_dir / "serve_concurrency.png")
