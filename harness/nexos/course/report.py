"""How a grade is shown: a rich table, JSON and JUnit XML (`nexos grade`, the lab kit's
batches). No grading, no QEMU."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict

from rich import box
from rich.table import Table

from nexos.records import CheckResult


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
