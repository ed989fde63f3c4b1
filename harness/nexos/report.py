"""Presentation of parsed records: rich tables, JSON and JUnit XML. No parsing, no QEMU."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path

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


def compare_table(records: list[dict[str, object]]) -> Table:
    """One row per configuration (records from compare.probe_record)."""
    t = Table(title="smolprobe: eager vs lazy KV-cache pages")
    cols = [("config", "config"), ("max", "max_kv_pages"), ("actual", "actual_mapped_pages"),
            ("saved", "saved_pages"), ("saved %", "saved_percent"),
            ("reserve mapped", "reserve_mapped_pages"), ("reserve used", "reserve_used_pages"),
            ("decode mapped", "decode_mapped_pages"), ("decode used", "decode_used_pages"),
            ("verdict", "verdict"), ("time s", "seconds")]
    for head, _ in cols:
        t.add_column(head, justify="left" if head in ("config", "verdict") else "right")
    for rec in records:
        if rec.get("problem") or rec.get("error"):
            why = str(rec.get("problem") or f"smolprobe error: {rec.get('error')}")
            t.add_row(str(rec["config"]), *(["-"] * (len(cols) - 3)), f"[red]{why}[/]",
                      _cell(rec, "seconds"))
            continue
        row = [_cell(rec, k) for _, k in cols]
        if rec.get("saved_percent") is not None:
            row[4] = f"{rec['saved_percent']}%"
        t.add_row(*row)
    return t


def grade_table(results: list[CheckResult]) -> Table:
    t = Table(title="nexos grade")
    for c in ("config", "check", "result", "points", "time s", "detail"):
        t.add_column(c, justify="right" if c in ("points", "time s") else "left")
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
