"""smolserve's output (docs/smolserve.md, "Output"): its schema, read by the shared machinery
of nexos.parse.core, and the typed result (nexos.records.ServeResult) built from it.

Every `[smolserve] ` line must be of a kind of LINE_KEYS or FIXED_LINES with exactly its
keys, in order, and the run's lines must come in the order of MODE_LINES; an error run is
the start of a run cut short by its `error:` line. Other console lines (the shell, kernel
messages) are ignored; a kernel's `usertrap:` line (a worker killed for want of memory) is
taken out first, even from the middle of a smolserve line, where the console may put it.

To add a line kind: its row in LINE_KEYS (and in docs/smolserve.md's table), its place in
MODE_LINES, and its record: an event kind goes in EVENT_KINDS (its keys are ServeEvent
fields), a line printed once in ONCE_LINES.
"""

from __future__ import annotations

from nexos.parse.core import (
    ERROR,
    ID,
    INT,
    LOADING,
    MANY,
    PERCENT,
    TENTHS,
    Keys,
    Modes,
    Record,
    Schema,
    Value,
    read_run,
)
from nexos.records import (
    PrefixSummary,
    PressureSummary,
    ServeEvent,
    ServeMemory,
    ServePrefix,
    ServePressure,
    ServeRequest,
    ServeResult,
    ServeStart,
    ServeSummary,
)

# --------------------------------------------------------------------------- the schema

REASONS = ("watermark", "reaping", "processes", "fork_failed", "reserve_failed")

LINE_KEYS: Keys = {
    "workload": (("name", ID), ("requests", INT), ("longest_max_len", INT)),
    "prefix": (("id", ID), ("tokens", INT), ("requests", INT), ("max_len", INT),
               ("reserved_kv_pages", INT), ("mapped_kv_pages", INT), ("prefill_ms", INT)),
    "start": (("lazy_alloc", INT), ("cow_alloc", INT), ("ncpu", INT), ("total_pages", INT),
              ("free_pages", INT), ("kv_bytes_per_slot", INT), ("watermark_base_pages", INT),
              ("grow_pages", INT), ("load_ms", INT)),
    "admit": (("id", ID), ("attempt", INT), ("t_ms", INT), ("running", INT), ("queued", INT),
              ("free_pages", INT), ("est_pages", INT), ("watermark_pages", INT),
              ("fork_pages", INT), ("reserve_mapped_pages", INT), ("reserved_kv_pages", INT),
              ("used_pages", INT), ("pagecache_pages", INT)),
    "queue": (("id", ID), ("t_ms", INT), ("running", INT), ("queued", INT),
              ("free_pages", INT), ("est_pages", INT), ("watermark_pages", INT),
              ("reason", REASONS), ("used_pages", INT)),
    "finish": (("id", ID), ("t_ms", INT), ("running", INT), ("queued", INT),
               ("generated", INT), ("used_slots", INT), ("mapped_kv_pages", INT),
               ("decode_ms", INT), ("used_pages", INT)),
    "recompute": (("id", ID), ("attempt", INT), ("t_ms", INT), ("running", INT),
                  ("queued", INT), ("status", INT), ("used_pages", INT)),
    "request": (("id", ID), ("max_len", INT), ("prompt", INT), ("generated", INT),
                ("reserved_slots", INT), ("used_slots", INT), ("internal_waste_slots", INT),
                ("reserved_kv_pages", INT), ("mapped_kv_pages", INT),
                ("needed_kv_pages", INT), ("attempts", INT), ("prefix_tokens", INT),
                ("shared_kv_pages", INT), ("copied_kv_pages", INT), ("answer_fnv", INT)),
    "SERVE_SUMMARY": (("requests", INT), ("completed", INT), ("peak_concurrent", INT),
                      ("queued", INT), ("recomputed", INT), ("reserved_kv_pages", INT),
                      ("mapped_kv_pages", INT), ("waste_percent", PERCENT),
                      ("peak_used_pages", INT), ("tokens_per_s", TENTHS)),
    "PREFIX_SUMMARY": (("prefixes", INT), ("sharing_requests", INT), ("prefill_tokens", INT),
                       ("prefill_tokens_saved", INT), ("prefix_kv_pages", INT),
                       ("shared_kv_pages", INT), ("copied_kv_pages", INT),
                       ("kv_pages_saved", INT)),
    "pressure": (("id", ID), ("attempts", INT), ("recomputed_tokens", INT),
                 ("paged_out", INT), ("paged_in", INT)),
    "PRESSURE_SUMMARY": (("completed", INT), ("recomputed", INT), ("recomputed_tokens", INT),
                         ("swap_slots", INT), ("swap_outs", INT), ("swap_ins", INT),
                         ("dropped_file_pages", INT), ("wall_ms", INT)),
    "memory": (("baseline_free_pages", INT), ("final_free_pages", INT),
               ("leaked_pages", INT)),
}

FIXED_LINES = {"loading": LOADING, "error": ERROR}

# The text after the key=value pairs, where a line kind has one.
TRAILERS = {"recompute": "(killed before it finished; it runs again)"}

# The serving phase's lines, in the order they happened.
EVENT_KINDS = ("admit", "queue", "finish", "recompute")

MODE_LINES: Modes = {
    "serve": ((("loading",), 1, 1), (("workload",), 1, 1), (("prefix",), 0, MANY),
              (("start",), 1, 1), (EVENT_KINDS, 0, MANY), (("request",), 1, MANY),
              (("SERVE_SUMMARY",), 1, 1), (("PREFIX_SUMMARY",), 1, 1), (("pressure",), 0, MANY),
              (("PRESSURE_SUMMARY",), 0, 1), (("memory",), 1, 1)),
}

SCHEMA = Schema("smolserve", LINE_KEYS, FIXED_LINES, MODE_LINES, TRAILERS)

# --------------------------------------------------------------------------- the records

# The lines printed once that are a record each: kind -> (ServeResult field, record type).
ONCE_LINES = {"SERVE_SUMMARY": ("summary", ServeSummary),
              "PREFIX_SUMMARY": ("prefix_summary", PrefixSummary),
              "PRESSURE_SUMMARY": ("pressure_summary", PressureSummary),
              "memory": ("memory", ServeMemory)}
MANY_LINES = EVENT_KINDS + ("request", "prefix", "pressure")


def _start(workload: dict[str, Value], start: dict[str, Value]) -> ServeStart:
    """The workload and start lines as one record (the workload's `name` is `workload`)."""
    named = {"workload": workload["name"], "requests": workload["requests"],
             "longest_max_len": workload["longest_max_len"]}
    return ServeStart(**named, **start)  # type: ignore[arg-type]


def serve_result(records: list[Record]) -> ServeResult:
    """The typed result of a run's checked records (read_run)."""
    once = {r.kind: r.fields for r in records if r.kind not in MANY_LINES}
    parts = {name: typ(**once[kind]) if kind in once else None  # type: ignore[arg-type]
             for kind, (name, typ) in ONCE_LINES.items()}
    start = _start(once["workload"], once["start"]) if "start" in once else None
    error = once["error"]["message"] if "error" in once else None
    return ServeResult(
        start=start,
        events=tuple(ServeEvent(kind=r.kind, **r.fields)  # type: ignore[arg-type]
                     for r in records if r.kind in EVENT_KINDS),
        requests=tuple(ServeRequest(**r.fields)  # type: ignore[arg-type]
                       for r in records if r.kind == "request"),
        prefixes=tuple(ServePrefix(**r.fields)  # type: ignore[arg-type]
                       for r in records if r.kind == "prefix"),
        pressure=tuple(ServePressure(**r.fields)  # type: ignore[arg-type]
                       for r in records if r.kind == "pressure"),
        error=None if error is None else str(error), **parts)  # type: ignore[arg-type]


def parse_serve(text: str) -> ServeResult:
    """Parse the console output of one smolserve command against docs/smolserve.md,
    "Output": every line of its kind's schema, in the run's order, the run complete (or
    cut short by its `error:` line, returned with `error` set). ParseError names what is
    wrong."""
    records, _, _ = read_run(SCHEMA, text, lambda _: "serve")
    return serve_result(records)
