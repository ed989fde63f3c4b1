"""nexos.machine.limits: the C programs' defaults and limits come from their headers, and a header
that lacks one is a clear error (docs/harness.md, "Values from the C side")."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexos.machine import limits
from nexos.machine.limits import LimitsError, read_defines, read_make_values

REPO = Path(__file__).resolve().parents[2]


def test_values_are_the_headers_defines():
    probe = (REPO / "user" / "smolprobe" / "smolprobe.h").read_text()
    serve = (REPO / "user" / "smolserve" / "smolserve.h").read_text()
    assert f"#define DEFAULT_TEXT_GEN {limits.SMOLPROBE_TEXT_GEN} " in probe
    assert f"#define MAX_SAMPLES {limits.SMOLPROBE_MAX_SAMPLES} " in probe
    assert f"#define DEFAULT_SEQ_LEN {limits.SMOLPROBE_SEQ_LEN} " in probe
    assert f"#define MAX_REQ {limits.SMOLSERVE_MAX_REQUESTS} " in serve
    assert f"#define MAX_PROMPT {limits.SMOLSERVE_MAX_PROMPT} " in serve
    assert f"#define PGSIZE  {limits.PAGE_SIZE} " in (REPO / "kernel" / "riscv.h").read_text()
    assert f"#define NCPU          {limits.MAX_CPUS} " in (REPO / "kernel/param.h").read_text()
    make = (REPO / "Makefile").read_text()
    assert f"\nDEFAULT_MEMSIZE := {limits.DEFAULT_MEMSIZE}\n" in make
    assert "\nMEMSIZE ?= $(DEFAULT_MEMSIZE)\n" in make


def test_the_values_have_no_second_home():
    """The page size, the default RAM and the model's path are not defined again where the
    C programs and the harness use them."""
    for header in ("user/smolprobe/smolprobe.h", "user/smolserve/smolserve.h",
                   "user/tests/mapwrite.c"):
        text = (REPO / header).read_text()
        assert "#define PGSIZE" not in text and '"/model.bin"' not in text, header
    assert "#define MEMSIZE_MB" not in (REPO / "kernel/param.h").read_text()
    for module in ("programs/kvcache.py", "machine/elf.py", "machine/config.py",
                   "programs/serve.py", "model/reference.py"):
        text = (REPO / "harness/nexos" / module).read_text()
        for copy in ("PAGE = 4096", "DEFAULT_MEMSIZE = 512", "MAX_CPUS = 8", "1 << 24",
                     "DEFAULT_SEQ_LEN = 256"):
            assert copy not in text, (module, copy)


def test_a_missing_define_is_named(tmp_path):
    h = tmp_path / "x.h"
    h.write_text("#define A 1   // one\n#define B \"text\"\n")
    assert read_defines(h, ("A",)) == {"A": 1}
    with pytest.raises(LimitsError, match=r"x\.h: no `#define B <integer>` line"):
        read_defines(h, ("A", "B"))
    with pytest.raises(LimitsError, match="cannot read"):
        read_defines(tmp_path / "none.h", ("A",))
    h.write_text("#define C (1 << 5)  // shifted\n")
    assert read_defines(h, ("C",)) == {"C": 32}
    mk = tmp_path / "Makefile"
    mk.write_text("X := 7\nY ?= 3\n")
    assert read_make_values(mk, ("X",)) == {"X": 7}
    with pytest.raises(LimitsError, match=r"Makefile: no `Y := <integer>` line"):
        read_make_values(mk, ("Y",))
