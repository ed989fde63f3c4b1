"""Parsers for NexOS console output; each returns typed records.

    core       the one line parser: a program's schema (its docs' "Output" table as data),
               ParseError, the kernel's fault lines (`panic:`, `usertrap:`)
    console    the boot line, the test programs' verdicts, a shell command's problems
    smolprobe  smolprobe's schema, its records (SmolprobeResult) and cross-line checks
    smolserve  smolserve's schema; its records are nexos.records' Serve* classes

Malformed or missing lines raise ParseError, which carries the offending text so a report can
show the evidence. The parsers import no harness module but nexos.records (plain data).
"""

from nexos.parse.console import (
    BootInfo,
    TestVerdict,
    find_problems,
    parse_boot_line,
    parse_test_verdict,
)
from nexos.parse.core import (
    ParseError,
    Record,
    Schema,
    Value,
    find_panic,
    find_usertraps,
    parse_value,
    split_records,
)
from nexos.parse.smolprobe import (
    MODES,
    PARALLEL_VERDICTS,
    PREFIX,
    VERDICTS,
    Branch,
    ForkFailure,
    KilledBranch,
    SmolprobeResult,
    TraceStep,
    UnstartedBranch,
    parse_smolprobe,
    unescape_text,
)
from nexos.parse.smolserve import parse_serve

__all__ = [
    "MODES", "PARALLEL_VERDICTS", "PREFIX", "VERDICTS", "BootInfo", "Branch", "ForkFailure",
    "KilledBranch", "ParseError", "Record", "Schema", "SmolprobeResult", "TestVerdict",
    "TraceStep", "UnstartedBranch", "Value", "find_panic", "find_problems", "find_usertraps",
    "parse_boot_line", "parse_serve", "parse_smolprobe", "parse_test_verdict", "parse_value",
    "split_records", "unescape_text",
]
