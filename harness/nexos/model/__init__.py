"""Model tools: the NexOS checkpoint format, synthetic and Hugging Face checkpoints,
and the numpy reference forward pass that smolprobe must agree with.

Public API (what the harness and the smolprobe tests call):

- ``ModelConfig``, ``Checkpoint``, ``CheckpointError``, ``read_header``, ``load_checkpoint``,
  ``checkpoint_size``, ``write_checkpoint`` (format.py)
- ``synthesize``, ``PRESETS`` (synth.py)
- ``import_hf`` (hf_import.py)
- ``generate``, ``GenerationResult``, ``Transformer`` (reference.py)

Each name is imported from its module when first asked for: every `nexos` command imports
this package (the tokenizer's asset paths live in it), and most never need numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    **dict.fromkeys(("Checkpoint", "CheckpointError", "ModelConfig", "checkpoint_size",
                     "load_checkpoint", "read_header", "write_checkpoint"), "format"),
    "import_hf": "hf_import",
    **dict.fromkeys(("GenerationResult", "Transformer", "generate"), "reference"),
    **dict.fromkeys(("PRESETS", "synthesize"), "synth"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'nexos.model' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nexos.model.{home}"), name)
