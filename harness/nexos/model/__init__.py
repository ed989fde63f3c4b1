"""Model tools: the NexOS checkpoint format, synthetic and Hugging Face checkpoints,
and the numpy reference forward pass that smolprobe must agree with.

Public API (what the harness and the smolprobe tests call):

- ``ModelConfig``, ``Checkpoint``, ``CheckpointError``, ``read_header``, ``load_checkpoint``,
  ``checkpoint_size``, ``write_checkpoint`` (format.py)
- ``synthesize``, ``PRESETS`` (synth.py)
- ``import_hf`` (hf_import.py)
- ``generate``, ``GenerationResult``, ``Transformer`` (reference.py)
"""

from nexos.model.format import (
    Checkpoint,
    CheckpointError,
    ModelConfig,
    checkpoint_size,
    load_checkpoint,
    read_header,
    write_checkpoint,
)
from nexos.model.hf_import import import_hf
from nexos.model.reference import GenerationResult, Transformer, generate
from nexos.model.synth import PRESETS, synthesize

__all__ = [
    "PRESETS",
    "Checkpoint",
    "CheckpointError",
    "GenerationResult",
    "ModelConfig",
    "Transformer",
    "checkpoint_size",
    "generate",
    "import_hf",
    "load_checkpoint",
    "read_header",
    "synthesize",
    "write_checkpoint",
]
