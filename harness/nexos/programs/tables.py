"""How the model programs' records are shown: rich tables and JSON (`nexos probe`, `compare`,
`serve`). No parsing, no QEMU."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich import box
from rich.table import Table

from nexos.parse import SmolprobeResult
from nexos.records import ProbeRecord, ServeRecord, SwapComparison


def probe_table(res: SmolprobeResult, title: str = "smolprobe") -> Table:
    """Every parsed part of one smolprobe result, one row per value."""
    t = Table(title=title)
    t.add_column("line")
    t.add_column("field")
    t.add_column("value", justify="right")
    if res.error:
        t.add_row("error", "", res.error)
        return t
    parts = [("request", res.request), ("kv_capacity", res.kv_capacity),
             ("SUMMARY", res.summary), ("reserve_phase", res.reserve),
             ("prefill_phase", res.prefill), ("decode_phase", res.decode),
             ("fork_phase", res.fork), ("PARALLEL_SUMMARY", res.parallel),
             ("timing", res.timing)]
    for name, part in parts:
        if part is None:
            continue
        for k, v in asdict(part).items():
            if v is not None:
                t.add_row(name, k, str(v))
    for b in res.branches:
        t.add_row(f"branch {b.index}", "cow_copies/reuses/new_kv_pages",
                  f"{b.cow_copies}/{b.cow_reuses}/{b.new_kv_pages}")
    for gone in [*res.killed, *res.unstarted, *res.fork_failed]:
        t.add_row(f"branch {gone.index}", "", gone.line)
    if res.tokens is not None:
        t.add_row("tokens", "", ",".join(map(str, res.tokens)))
    if res.trace:
        t.add_row("trace", "steps", str(len(res.trace)))
    if res.verdict:
        t.add_row("verdict", res.verdict, res.verdict_text)
    if res.parallel_verdict:
        t.add_row("verdict", res.parallel_verdict, res.parallel_verdict_text)
    return t


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _pair(mapped: int | None, used: int | None) -> str:
    """`mapped/used` of one phase, `-` when absent."""
    return "-" if mapped is None else f"{mapped}/{_cell(used)}"


def _saved(pages: int | None, percent: int | None) -> str:
    return "-" if pages is None else f"{pages} ({_cell(percent)}%)"


def _seconds(rec: ProbeRecord) -> str:
    return f"{rec.seconds:.0f}s" if rec.seconds else "-"


def _why(rec: ProbeRecord) -> str:
    """Why a failed run has no numbers, cut to fit a table cell."""
    error = rec.numbers.error if rec.numbers else None
    return f"[red]{(rec.problem or f'smolprobe error: {error}')[:60]}[/]"


VERDICT_STYLE = {"LAZY_STYLE": "green", "EAGER_STYLE": "yellow", "MIXED": "red",
                 "COW_STYLE": "green", "EAGER_FORK_STYLE": "yellow"}


def _verdict(v: str | None) -> str:
    return "-" if v is None else f"[{VERDICT_STYLE.get(v, 'red')}]{v}[/]"


def formulas_note(records: list[ProbeRecord]) -> str:
    """The line under the compare table: what the formulas give for the request (of the
    first run: for a text prompt they need the token count that smolprobe printed)."""
    first = records[0]
    return (f"docs/kvcache.md formulas: max_kv_pages={first.expected_max_kv_pages} "
            f"active_pages_est={first.expected_active_pages_est}")


def compare_table(records: list[ProbeRecord], command: str = "") -> Table:
    """One row per single-request run (the --samples runs are parallel_table's); the row's
    kernel is the build folder, `lazy0-cow0`, which names both flags. Fits 80 columns."""
    t = Table(title="KV-cache pages: eager vs lazy sbrk", caption=command or None,
              box=box.SIMPLE_HEAD, title_style="bold", pad_edge=False, show_edge=False,
              padding=(0, 0))
    t.add_column("kernel", no_wrap=True)
    for head in ("max\npages", "mapped", "saved", "reserve\nmapped/used",
                 "decode\nmapped/used"):
        t.add_column(head, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("time", justify="right", no_wrap=True)
    for rec in records:
        if rec.samples is not None:
            continue
        n = rec.numbers
        if rec.failed or n is None:
            t.add_row(rec.config, "-", "-", "-", "-", "-", _why(rec), _seconds(rec))
            continue
        t.add_row(rec.config, _cell(n.max_kv_pages), _cell(n.actual_mapped_pages),
                  _saved(n.saved_pages, n.saved_percent),
                  _pair(n.reserve_mapped_pages, n.reserve_used_pages),
                  _pair(n.decode_mapped_pages, n.decode_used_pages),
                  _verdict(n.verdict), _seconds(rec))
    return t


def parallel_table(records: list[ProbeRecord]) -> Table | None:
    """The --samples table: one row per --samples run (the kernel's name says COW off or
    on); None when there is none. A fork that failed (COW_ALLOC=0 out of memory) or a
    branch that was killed shows as forked < asked or in red, and in the caption with
    smolprobe's own line. Fits 80 columns."""
    rows = [r for r in records if r.samples is not None]
    if not rows:
        return None
    commands = list(dict.fromkeys(r.command for r in rows))
    notes = [f"{r.config}: {line}" for r in rows
             if r.numbers is not None and r.numbers.parallel is not None
             for line in (*r.numbers.parallel.killed, *r.numbers.parallel.unstarted,
                          *r.numbers.parallel.fork_failures)]
    t = Table(title="Parallel sampling by fork: COW off vs on", box=box.SIMPLE_HEAD,
              title_style="bold", pad_edge=False, show_edge=False, padding=(0, 0),
              caption="\n".join([*commands, *notes[:4]]))
    t.add_column("kernel", no_wrap=True)
    for head in ("forked", "eager\ncopy", "copied", "saved", "COW\ncopy", "COW\nreuse",
                 "new\nKV"):
        t.add_column(head, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for rec in rows:
        p = rec.numbers.parallel if rec.numbers else None
        if rec.failed or p is None:
            t.add_row(rec.config, "-", "-", "-", "-", "-", "-", "-", _why(rec))
            continue
        forked = f"{p.forked}/{p.branches}"
        if p.fork_failures or p.killed or p.unstarted:
            forked = f"[red]{forked}[/]"
        t.add_row(rec.config, forked, _cell(p.eager_copy_pages), _cell(p.actual_copied_pages),
                  _saved(p.saved_pages, p.saved_percent), _cell(p.cow_copies),
                  _cell(p.cow_reuses), _cell(p.new_kv_pages), _verdict(p.verdict))
    return t


def record_json(record: ProbeRecord) -> str:
    return json.dumps(record.to_json(), indent=2)


def records_json(records: list[ProbeRecord]) -> str:
    return json.dumps([r.to_json() for r in records], indent=2)


def write_text(path: Path, text: str) -> None:
    Path(path).write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")


def serve_table(records: list[ServeRecord], command: str = "") -> Table:
    """`nexos serve`: one row per kernel configuration (docs/smolserve.md, SERVE_SUMMARY);
    when requests shared a prefix, also what that saved (PREFIX_SUMMARY)."""
    t = Table(title="smolserve: requests at once, eager vs lazy sbrk, COW off/on",
              caption=command, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
              collapse_padding=True)
    shared = any(r.result is not None and r.result.prefix_summary is not None
                 and r.result.prefix_summary.prefixes > 0 for r in records)
    names = ["at\nonce", "queue\nwaits", "re-\ncomp", "done", "KV\nresvd", "KV\nmapped",
             "waste", "peak\nMiB", "tok/s"]
    if shared:
        names += ["prefill\nsaved", "KV pages\nsaved"]
    t.add_column("kernel", no_wrap=True)
    for name in names:
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("all\nfreed", no_wrap=True)
    for rec in records:
        res = rec.result
        s = res.summary if res is not None else None
        if res is None or s is None or res.memory is None:
            why = rec.problem or (res.error if res is not None else None) or "no summary"
            t.add_row(rec.config, *["-"] * len(names), f"[red]{why}[/red]")
            continue
        leaked = res.memory.leaked_pages
        back = "yes" if leaked == 0 else f"[red]{leaked} lost[/red]"
        cells = [str(s.peak_concurrent), str(s.queued), str(s.recomputed),
                 f"{s.completed}/{s.requests}", str(s.reserved_kv_pages),
                 str(s.mapped_kv_pages), f"{s.waste_percent}%",
                 f"{s.peak_used_mib:.0f}", f"{s.tokens_per_s:.1f}"]
        if shared:
            p = res.prefix_summary
            cells += ["-", "-"] if p is None else [f"{p.prefill_tokens_saved} tok",
                                                   str(p.kv_pages_saved)]
        t.add_row(rec.config, *cells, back)
    return t


def swap_table(comparisons: list[SwapComparison]) -> Table:
    """`nexos serve --swap`: per workload and kernel, side by side, what the run without swap
    (recompute) and the one with swap cost (docs/smolserve.md, "Overcommit"). The caption
    says whether every request completed with the same answer both ways, or why not."""
    swap = comparisons[0].swapsize if comparisons else 0
    problems = [f"{c.workload} {c.without.config}: {c.problem}" for c in comparisons
                if c.problem is not None]
    caption = ("\n".join(f"[red]{p}[/red]" for p in problems) if problems else
               "every request completed, with the same answers without swap and with")
    t = Table(title=f"smolserve overcommitted: recompute (no swap) vs swap ({swap} MiB); "
                    "secs: wall time",
              caption=caption, box=box.SIMPLE_HEAD, padding=0)
    t.add_column("workload", no_wrap=True)
    t.add_column("kernel", no_wrap=True)
    # the first header line names the way for the columns up to the next one that names one
    names = ["no swap\ndone", "\nrecomp", "\ntokens", "\nsecs",
             "swap\ndone", "\nrecomp", "\nout", "\nin", "\nsecs"]
    for name in names:
        t.add_column(name, justify="right", no_wrap=True)
    for c in comparisons:
        cells: list[str] = []
        for rec in (c.without, c.with_swap):
            res = rec.result
            ps = res.pressure_summary if res is not None else None
            if res is None or ps is None:
                cells += ["-"] * (4 if rec is c.without else 5)
                continue
            cells += [f"{ps.completed}/{len(res.requests)}", str(ps.recomputed)]
            cells += [str(ps.recomputed_tokens)] if rec is c.without else [
                str(ps.swap_outs), str(ps.swap_ins)]
            cells.append(f"{ps.wall_ms / 1000:.1f}")
        t.add_row(c.workload, c.without.config, *cells)
    return t


def swap_json(comparisons: list[SwapComparison]) -> str:
    """`nexos serve --swap --json`: every pair with both records' parsed figures."""
    return json.dumps([c.to_json() for c in comparisons], indent=2)


def serve_json(records: list[ServeRecord]) -> str:
    """`nexos serve --json`: every record with every parsed figure."""
    return json.dumps([r.to_json() for r in records], indent=2)
