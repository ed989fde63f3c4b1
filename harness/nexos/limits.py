"""The C programs' defaults and limits that the harness needs, read from the programs' own
headers so that each value has one home: user/smolprobe/smolprobe.h and
user/smolserve/smolserve.h, in the checkout this harness belongs to (docs/harness.md,
"Values from the C side").

A header line `#define NAME 123   // why` gives NAME; a name the harness needs that is
missing from its header is an error at import, not a silent default.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
DEFINE_RE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(\d+)\b", re.M)


class LimitsError(RuntimeError):
    """A header the harness reads is missing, or lacks a value it needs."""


def read_defines(header: Path, names: tuple[str, ...]) -> dict[str, int]:
    """The integer `#define`s `names` of `header`."""
    try:
        text = header.read_text()
    except OSError as e:
        raise LimitsError(f"{header}: cannot read ({e.strerror}); the harness reads the C "
                          "programs' limits from the checkout it is installed from") from None
    found = {m[1]: int(m[2]) for m in DEFINE_RE.finditer(text)}
    missing = [n for n in names if n not in found]
    if missing:
        raise LimitsError(f"{header}: no `#define {missing[0]} <integer>` line")
    return {n: found[n] for n in names}


_PROBE = read_defines(CHECKOUT / "user" / "smolprobe" / "smolprobe.h",
                      ("DEFAULT_SEQ_LEN", "DEFAULT_TEXT_GEN", "MAX_SAMPLES"))
_SERVE = read_defines(CHECKOUT / "user" / "smolserve" / "smolserve.h",
                      ("MAX_REQ", "MAX_PROMPT", "ID_LEN", "MAX_FILE", "MAX_CHAT"))

SMOLPROBE_SEQ_LEN = _PROBE["DEFAULT_SEQ_LEN"]   # --seq-len when none is given (capped by the model)
SMOLPROBE_TEXT_GEN = _PROBE["DEFAULT_TEXT_GEN"]  # --gen-len of --prompt/--chat when none is given
SMOLPROBE_MAX_SAMPLES = _PROBE["MAX_SAMPLES"]    # --samples 1..this
SMOLSERVE_MAX_REQUESTS = _SERVE["MAX_REQ"]       # requests in one workload
SMOLSERVE_MAX_PROMPT = _SERVE["MAX_PROMPT"]      # prompt tokens of one request
SMOLSERVE_MAX_ID = _SERVE["ID_LEN"] - 1          # characters of a request id (C keeps a NUL)
SMOLSERVE_MAX_FILE = _SERVE["MAX_FILE"]          # bytes of a workload file
SMOLSERVE_MAX_CHAT = _SERVE["MAX_CHAT"] - 1      # characters of a chat message (and a NUL)
