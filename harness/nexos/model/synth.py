"""Deterministic synthetic checkpoints: the SmolLM-135M geometry (or a small test one)
filled with seeded random weights.

The weights are meaningless (so are the tokens they produce); the geometry, file size and
memory behaviour are exactly the real model's. Scales keep the forward pass well behaved:
every projection has std ``1/sqrt(in_features)`` so each sub-layer adds an O(1) update to
the residual stream (it does not stay dominated by the token embedding, which with tied
embeddings would make greedy decoding repeat its input token), norms are 1.0, and the
embedding has std 0.05. ``wq`` and ``wk`` get an extra gain of 3 (attention scores with
std ~9, so each head attends sharply to a few positions chosen by content and RoPE): with
diffuse attention the context average dominates and greedy decoding soon repeats one token.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nexos.model.format import (
    WEIGHT_F32,
    WEIGHT_INT8,
    CheckpointError,
    CheckpointWriter,
    ModelConfig,
    checkpoint_size,
    layout,
)

EMBED_STD = 0.05
QK_GAIN = 3.0

PRESETS: dict[str, ModelConfig] = {
    "smollm-135m": ModelConfig(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3,
                               vocab_size=49152, max_seq_len=2048, tied_embeddings=True,
                               rope_theta=10000.0, norm_eps=1e-5),
    "small": ModelConfig(dim=128, hidden_dim=256, n_layers=4, n_heads=4, n_kv_heads=2,
                         vocab_size=512, max_seq_len=256, tied_embeddings=True),
    "tiny": ModelConfig(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2,
                        vocab_size=256, max_seq_len=128, tied_embeddings=True),
}

WEIGHT_TYPES = {"int8": WEIGHT_INT8, "f32": WEIGHT_F32}


@dataclass
class SynthResult:
    """What ``synthesize`` wrote."""

    path: str
    config: ModelConfig
    size: int
    seconds: float


def preset_config(preset: str, weight_type: str = "int8", n_layers: int | None = None,
                  tied: bool | None = None) -> ModelConfig:
    """The config of ``preset`` with the given overrides (CheckpointError if unknown)."""
    if preset not in PRESETS:
        raise CheckpointError(f"unknown preset {preset!r} (have: {', '.join(PRESETS)})")
    if weight_type not in WEIGHT_TYPES:
        raise CheckpointError(f"unknown weight type {weight_type!r} (int8 or f32)")
    base = PRESETS[preset]
    cfg = dataclasses.replace(
        base,
        weight_type=WEIGHT_TYPES[weight_type],
        group_size=64,
        n_layers=base.n_layers if n_layers is None else n_layers,
        tied_embeddings=base.tied_embeddings if tied is None else tied,
    )
    cfg.validate()
    return cfg


def _std(name: str, cols: int) -> float:
    """Standard deviation of the synthetic weights of section ``name`` with ``cols`` inputs."""
    if name in ("tok_embedding", "classifier"):
        return EMBED_STD
    gain = QK_GAIN if name in ("wq", "wk") else 1.0
    return gain / float(np.sqrt(cols))


def synthesize(path: str | Path, preset: str = "smollm-135m", seed: int = 0,
               weight_type: str = "int8", n_layers: int | None = None,
               tied: bool | None = None) -> SynthResult:
    """Write a synthetic checkpoint to ``path``. Same arguments → identical bytes.

    One ``np.random.default_rng(seed)`` stream fills the sections in file order; each
    section is generated, (quantized and) written before the next, so memory stays at about
    one embedding matrix."""
    t0 = time.perf_counter()
    cfg = preset_config(preset, weight_type, n_layers, tied)
    rng = np.random.default_rng(seed)
    w = CheckpointWriter(path, cfg)
    try:
        for sec in layout(cfg):
            if not sec.is_block:
                w.put(sec.name, np.ones(sec.shape, dtype=np.float32))
                continue
            a = rng.standard_normal(sec.shape, dtype=np.float32)
            a *= np.float32(_std(sec.name, sec.shape[1]))
            w.put(sec.name, a)
        w.close()
    except BaseException:
        w.abort()
        raise
    return SynthResult(str(path), cfg, checkpoint_size(cfg), time.perf_counter() - t0)
