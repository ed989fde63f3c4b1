"""The console keeps lines whole across harts (kernel/uart.c): `usertests consolemix` has
one process print numbered lines while its siblings are killed for faults, so the kernel's
`usertrap:` lines go out while the writer's bytes drain from another hart. Every line of
the transcript must be one of the two, whole: the harness counts the kernel's kill lines
and parses the programs' own, and a line split by the other hart's bytes loses both."""

from __future__ import annotations

import re

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession

MIX_LINES = 400      # user/tests/usertests.c consolemix
MIX_FAULTERS = 24
KILL_RE = re.compile(r"usertrap: pid \d+ \(usertests\) killed: scause 0x0{15}d "
                     r"sepc 0x[0-9a-f]{16} stval 0x[0-9a-f]{16}")
LINE_RE = re.compile(r"consolemix line (\d+) of 400: the quick brown fox jumps over the lazy dog")
VERDICT = ["test consolemix: OK", "test leakcheck: OK", "ALL TESTS PASSED"]


def test_kernel_lines_and_process_lines_stay_whole(build_kernel, repo):
    cfg = BuildConfig(1, 1, cpus=2)
    build_kernel(cfg)
    with QemuSession.for_config(cfg, repo) as s:
        lines = s.run("usertests consolemix", timeout=300).output.splitlines()
    kills = [i for i, ln in enumerate(lines) if KILL_RE.fullmatch(ln)]
    written = [int(m.group(1)) for ln in lines if (m := LINE_RE.fullmatch(ln))]
    split = [ln for ln in lines
             if not KILL_RE.fullmatch(ln) and not LINE_RE.fullmatch(ln) and ln not in VERDICT]
    assert split == [], f"lines split by the other hart: {split[:6]}"
    assert len(kills) == MIX_FAULTERS
    assert written == list(range(MIX_LINES))
    assert lines[-3:] == VERDICT
    # the two really went out together: some kill lines fell between the writer's lines
    first = next(i for i, ln in enumerate(lines) if LINE_RE.fullmatch(ln))
    last = max(i for i, ln in enumerate(lines) if LINE_RE.fullmatch(ln))
    assert any(first < k < last for k in kills), "no kill line came while the writer wrote"
