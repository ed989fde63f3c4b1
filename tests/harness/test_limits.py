"""nexos.limits: the C programs' defaults and limits come from their headers, and a header
that lacks one is a clear error (docs/harness.md, "Values from the C side")."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexos import limits
from nexos.limits import LimitsError, read_defines

REPO = Path(__file__).resolve().parents[2]


def test_values_are_the_headers_defines():
    probe = (REPO / "user" / "smolprobe" / "smolprobe.h").read_text()
    serve = (REPO / "user" / "smolserve" / "smolserve.h").read_text()
    assert f"#define DEFAULT_TEXT_GEN {limits.SMOLPROBE_TEXT_GEN} " in probe
    assert f"#define MAX_SAMPLES {limits.SMOLPROBE_MAX_SAMPLES} " in probe
    assert f"#define DEFAULT_SEQ_LEN {limits.SMOLPROBE_SEQ_LEN} " in probe
    assert f"#define MAX_REQ {limits.SMOLSERVE_MAX_REQUESTS} " in serve
    assert f"#define ID_LEN {limits.SMOLSERVE_MAX_ID + 1} " in serve


def test_a_missing_define_is_named(tmp_path):
    h = tmp_path / "x.h"
    h.write_text("#define A 1   // one\n#define B \"text\"\n")
    assert read_defines(h, ("A",)) == {"A": 1}
    with pytest.raises(LimitsError, match=r"x\.h: no `#define B <integer>` line"):
        read_defines(h, ("A", "B"))
    with pytest.raises(LimitsError, match="cannot read"):
        read_defines(tmp_path / "none.h", ("A",))
