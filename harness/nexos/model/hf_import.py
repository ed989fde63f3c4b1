"""Import a Hugging Face Llama/SmolLM model (``config.json`` + ``model.safetensors``).

The safetensors file is read directly with numpy (8-byte little-endian header length, a
JSON header, then raw little-endian data), which also handles BF16: numpy has no bfloat16,
so BF16 values are widened by shifting their 16 bits into the top of a float32.
Hugging Face Llama weights already use the half-rotation RoPE layout: no permutation.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nexos.model.format import (
    CheckpointError,
    CheckpointWriter,
    ModelConfig,
    checkpoint_size,
    layout,
)
from nexos.model.synth import WEIGHT_TYPES

_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}

# checkpoint section -> Hugging Face tensor name ({i} = layer)
HF_NAMES = {
    "tok_embedding": "model.embed_tokens.weight",
    "rms_att": "model.layers.{i}.input_layernorm.weight",
    "rms_ffn": "model.layers.{i}.post_attention_layernorm.weight",
    "rms_final": "model.norm.weight",
    "wq": "model.layers.{i}.self_attn.q_proj.weight",
    "wk": "model.layers.{i}.self_attn.k_proj.weight",
    "wv": "model.layers.{i}.self_attn.v_proj.weight",
    "wo": "model.layers.{i}.self_attn.o_proj.weight",
    "w_gate": "model.layers.{i}.mlp.gate_proj.weight",
    "w_down": "model.layers.{i}.mlp.down_proj.weight",
    "w_up": "model.layers.{i}.mlp.up_proj.weight",
    "classifier": "lm_head.weight",
}


class HFImportError(CheckpointError):
    """The Hugging Face files cannot be imported; the message says which key or tensor."""


class SafeTensors:
    """Read-only access to the tensors of one ``.safetensors`` file as float32."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(8)
                if len(raw) < 8:
                    raise HFImportError(f"{path}: too short for a safetensors file")
                (n,) = struct.unpack("<Q", raw)
                header = json.loads(f.read(n).decode("utf-8"))
        except OSError as e:
            raise HFImportError(f"cannot read {path}: {e.strerror}") from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise HFImportError(f"{path}: bad safetensors header (not JSON)") from None
        if not isinstance(header, dict):
            raise HFImportError(f"{path}: bad safetensors header")
        header.pop("__metadata__", None)
        self.info: dict[str, dict[str, Any]] = header
        self._start = 8 + n
        self._buf = np.memmap(path, dtype=np.uint8, mode="r")

    def __contains__(self, name: str) -> bool:
        return name in self.info

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as float32, which must have ``shape``."""
        if name not in self.info:
            raise HFImportError(f"{self.path}: missing tensor {name}")
        meta = self.info[name]
        dt = meta.get("dtype")
        if dt not in _DTYPES:
            raise HFImportError(f"{name}: unsupported dtype {dt} (F32, F16 or BF16)")
        if tuple(meta.get("shape", ())) != shape:
            raise HFImportError(f"{name}: shape {tuple(meta.get('shape', ()))}, expected {shape}")
        np_dt, size = _DTYPES[dt]
        begin, end = meta["data_offsets"]
        count = int(np.prod(shape))
        if end - begin != count * size or self._start + end > self._buf.size:
            raise HFImportError(f"{name}: data offsets {begin}..{end} do not fit its shape or "
                                "the file (truncated?)")
        a = np.frombuffer(self._buf, np_dt, count, self._start + begin).reshape(shape)
        if dt == "BF16":
            return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return a.astype(np.float32)


def _key(cfg: dict[str, Any], name: str, default: Any = None) -> Any:
    if name in cfg and cfg[name] is not None:
        return cfg[name]
    if default is None:
        raise HFImportError(f"config.json: missing key {name}")
    return default


def config_from_hf(hf: dict[str, Any], weight_type: str, tied: bool) -> ModelConfig:
    """Map Hugging Face config keys onto a ModelConfig (HFImportError when unsupported)."""
    if hf.get("rope_scaling"):
        raise HFImportError("config.json: rope_scaling is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise HFImportError(f"config.json: hidden_act {hf['hidden_act']} (only silu)")
    heads = int(_key(hf, "num_attention_heads"))
    dim = int(_key(hf, "hidden_size"))
    if "head_dim" in hf and hf["head_dim"] is not None and hf["head_dim"] * heads != dim:
        raise HFImportError(f"config.json: head_dim {hf['head_dim']} != hidden_size / heads")
    cfg = ModelConfig(
        dim=dim, hidden_dim=int(_key(hf, "intermediate_size")),
        n_layers=int(_key(hf, "num_hidden_layers")), n_heads=heads,
        n_kv_heads=int(_key(hf, "num_key_value_heads", heads)),
        vocab_size=int(_key(hf, "vocab_size")),
        max_seq_len=int(_key(hf, "max_position_embeddings")),
        weight_type=WEIGHT_TYPES[weight_type], group_size=64, tied_embeddings=tied,
        rope_theta=float(_key(hf, "rope_theta", 10000.0)),
        norm_eps=float(_key(hf, "rms_norm_eps")),
    )
    cfg.validate()
    return cfg


@dataclass
class ImportResult:
    """What ``import_hf`` wrote."""

    path: str
    config: ModelConfig
    size: int
    seconds: float


def import_hf(config_path: str | Path, weights_path: str | Path,
              out: str | Path, weight_type: str = "int8") -> ImportResult:
    """Convert a Hugging Face Llama/SmolLM model to a NexOS checkpoint at ``out``.

    ``tie_word_embeddings`` decides the classifier (absent: tied iff there is no
    ``lm_head.weight``). Raises HFImportError (a CheckpointError) for a missing key or
    tensor, an unsupported dtype or a shape mismatch."""
    t0 = time.perf_counter()
    if weight_type not in WEIGHT_TYPES:
        raise HFImportError(f"unknown weight type {weight_type!r} (int8 or f32)")
    try:
        hf = json.loads(Path(config_path).read_text())
    except OSError as e:
        raise HFImportError(f"cannot read {config_path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise HFImportError(f"{config_path}: not valid JSON ({e.msg})") from None
    st = SafeTensors(weights_path)
    tied = hf.get("tie_word_embeddings")
    tied = (HF_NAMES["classifier"] not in st) if tied is None else bool(tied)
    cfg = config_from_hf(hf, weight_type, tied)
    w = CheckpointWriter(out, cfg)
    try:
        for sec in layout(cfg):
            name = HF_NAMES[sec.name]
            if sec.name in ("rms_att", "rms_ffn"):
                a = np.stack([st.get(name.format(i=i), (cfg.dim,))
                              for i in range(cfg.n_layers)])
            else:
                a = st.get(name.format(i=sec.layer), sec.shape)
            w.put(sec.name, a)
        w.close()
    except BaseException:
        w.abort()
        raise
    return ImportResult(str(out), cfg, checkpoint_size(cfg), time.perf_counter() - t0)
