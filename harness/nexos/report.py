"""Presentation of parsed records: rich tables, JSON and JUnit XML. No parsing, no QEMU."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

from rich import box
from rich.table import Table

from nexos.grade import CheckResult
from nexos.parse import SmolprobeResult


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
             ("decode_phase", res.decode), ("fork_phase", res.fork),
             ("PARALLEL_SUMMARY", res.parallel)]
    for name, part in parts:
        if part is None:
            continue
        for k, v in asdict(part).items():
            if v is not None:
                t.add_row(name, k, str(v))
    for b in res.branches:
        t.add_row(f"branch {b.index}", "cow_copies/reuses/new_kv_pages",
                  f"{b.cow_copies}/{b.cow_reuses}/{b.new_kv_pages}")
    if res.tokens is not None:
        t.add_row("tokens", "", ",".join(map(str, res.tokens)))
    if res.trace:
        t.add_row("trace", "steps", str(len(res.trace)))
    t.add_row("verdict", res.verdict or "", res.verdict_text)
    return t


def _cell(rec: dict[str, object], key: str) -> str:
    v = rec.get(key)
    return "-" if v is None else str(v)


def _pair(rec: dict[str, object], a: str, b: str) -> str:
    """`mapped / used` of one phase, `-` when absent."""
    if rec.get(a) is None:
        return "-"
    return f"{rec[a]}/{_cell(rec, b)}"


def config_label(rec: dict[str, object]) -> str:
    """The build folder, `lazy0-cow0`: it names both flags, so it says eager or lazy too."""
    return str(rec["config"])


VERDICT_STYLE = {"LAZY_STYLE": "green", "EAGER_STYLE": "yellow", "MIXED": "red",
                 "COW_STYLE": "green", "EAGER_FORK_STYLE": "yellow"}


def _verdict(v: object) -> str:
    if v is None:
        return "-"
    return f"[{VERDICT_STYLE.get(str(v), 'red')}]{v}[/]"


def compare_table(records: list[dict[str, object]], command: str = "") -> Table:
    """One row per configuration (records from compare.probe_record); fits 80 columns."""
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
        secs = f"{float(rec['seconds']):.0f}s" if rec.get("seconds") else "-"
        if rec.get("problem") or rec.get("error"):
            why = str(rec.get("problem") or f"smolprobe error: {rec.get('error')}")
            t.add_row(config_label(rec), "-", "-", "-", "-", "-", f"[red]{why[:60]}[/]", secs)
            continue
        saved = "-"
        if rec.get("saved_pages") is not None:
            saved = f"{rec['saved_pages']} ({_cell(rec, 'saved_percent')}%)"
        t.add_row(config_label(rec), _cell(rec, "max_kv_pages"),
                  _cell(rec, "actual_mapped_pages"), saved,
                  _pair(rec, "reserve_mapped_pages", "reserve_used_pages"),
                  _pair(rec, "decode_mapped_pages", "decode_used_pages"),
                  _verdict(rec.get("verdict")), secs)
    return t


def parallel_table(records: list[dict[str, object]]) -> Table | None:
    """The --samples table: one row per configuration that forked; None when none did.
    A fork that failed (COW_ALLOC=0 out of memory) shows as forked < branches and in the
    caption with smolprobe's own line."""
    rows = [r for r in records if isinstance(r.get("parallel"), dict)]
    if not rows:
        return None
    notes = [f"{r['config']}: {line}" for r in rows
             for line in r["parallel"].get("fork_failures", [])]  # type: ignore[union-attr]
    t = Table(title="Parallel sampling by fork: COW off vs on", box=box.SIMPLE_HEAD,
              title_style="bold", pad_edge=False, collapse_padding=True,
              caption="\n".join(notes[:4]) or None)
    t.add_column("kernel", no_wrap=True)
    t.add_column("COW", no_wrap=True)
    for head in ("forked", "eager\ncopy", "copied", "saved", "cow\ncopies", "cow\nreuses",
                 "new KV\npages"):
        t.add_column(head, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for rec in rows:
        p = rec["parallel"]
        assert isinstance(p, dict)
        saved = "-"
        if p.get("saved_pages") is not None:
            saved = f"{p['saved_pages']} ({_cell(p, 'saved_percent')}%)"
        forked = f"{p['forked']}/{p['branches']}"
        if p.get("fork_failures"):
            forked = f"[red]{forked}[/]"
        t.add_row(str(rec["config"]), "on" if rec.get("cow") else "off", forked,
                  _cell(p, "eager_copy_pages"), _cell(p, "actual_copied_pages"), saved,
                  _cell(p, "cow_copies"), _cell(p, "cow_reuses"), _cell(p, "new_kv_pages"),
                  _verdict(p.get("verdict")))
    return t


def grade_table(results: list[CheckResult]) -> Table:
    """One row per check; the detail is cut to the terminal (the JSON/JUnit keep it whole)."""
    t = Table(title="nexos grade", box=box.SIMPLE_HEAD, title_style="bold", pad_edge=False,
              expand=True)
    for c in ("config", "check", "result", "points", "time s"):
        t.add_column(c, justify="right" if c in ("points", "time s") else "left", no_wrap=True)
    t.add_column("detail", no_wrap=True, overflow="ellipsis", ratio=1)
    for r in results:
        mark = "[green]PASS[/]" if r.passed else "[red]FAIL[/]"
        t.add_row(r.config, r.name, mark, f"{r.points}/{r.max_points}", f"{r.seconds:.1f}",
                  r.message[:100])
    got = sum(r.points for r in results)
    total = sum(r.max_points for r in results)
    t.add_section()
    t.add_row("", "total", "", f"{got}/{total}", "", "")
    return t


def grade_json(results: list[CheckResult]) -> str:
    return json.dumps({
        "points": sum(r.points for r in results),
        "max_points": sum(r.max_points for r in results),
        "passed": all(r.passed for r in results),
        "checks": [asdict(r) for r in results],
    }, indent=2)


def grade_junit(results: list[CheckResult]) -> str:
    """JUnit XML: one testsuite per configuration, one testcase per check."""
    root = ET.Element("testsuites", name="nexos grade")
    suites: dict[str, ET.Element] = {}
    for r in results:
        suite = suites.get(r.config)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", name=r.config)
            suites[r.config] = suite
        case = ET.SubElement(suite, "testcase", classname=r.config, name=r.name,
                             time=f"{r.seconds:.3f}")
        if not r.passed:
            f = ET.SubElement(case, "failure", message=r.message)
            f.text = r.evidence
        else:
            ET.SubElement(case, "system-out").text = r.message
    for name, suite in suites.items():
        mine = [r for r in results if r.config == name]
        suite.set("tests", str(len(mine)))
        suite.set("failures", str(sum(not r.passed for r in mine)))
    root.set("tests", str(len(results)))
    root.set("failures", str(sum(not r.passed for r in results)))
    return ET.tostring(root, encoding="unicode")


def write_text(path: Path, text: str) -> None:
    Path(path).write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
