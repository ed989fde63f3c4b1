"""Import a Hugging Face Llama/SmolLM model (``config.json`` + safetensors weights).

The weights are one ``model.safetensors`` or the shards that ``model.safetensors.index.json``
lists, read with the ``safetensors`` package (F32, F16 and BF16 tensors; BF16 through its
raw-bytes API, see ``Shard._bf16_bytes`` and docs/model-tools.md).
Hugging Face Llama weights already use the half-rotation RoPE layout: no permutation.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, deserialize, safe_open

from nexos.model.format import (
    CheckpointError,
    CheckpointWriter,
    ModelConfig,
    checkpoint_size,
    layout,
    read_problem,
)
from nexos.model.synth import WEIGHT_TYPES

FLOAT_DTYPES = ("F32", "F16", "BF16")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

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
    """The Hugging Face files cannot be imported; the message says which file, key or tensor."""


def _widen_bf16(raw: bytes | bytearray, shape: tuple[int, ...]) -> np.ndarray:
    """bfloat16 bit patterns -> float32: a bfloat16 is the top half of a float32."""
    bits = np.frombuffer(raw, "<u2").reshape(shape)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


class Shard:
    """One ``.safetensors`` file, opened with ``safetensors.safe_open`` (which checks its
    header and that the tensors' data offsets cover the file exactly)."""

    def __init__(self, path: Path, stack: ExitStack) -> None:
        self.path = path
        try:
            self._f = stack.enter_context(safe_open(str(path), framework="numpy"))
        except SafetensorError as e:
            raise HFImportError(f"{path}: not a valid safetensors file ({e})") from None
        except OSError as e:
            raise HFImportError(read_problem(path, e)) from None
        self.names = set(self._f.keys())
        self._bf16: dict[str, bytearray] | None = None

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` (which must be in this file) as float32; it must have ``shape``."""
        view = self._f.get_slice(name)
        dt, have = view.get_dtype(), tuple(view.get_shape())
        if dt not in FLOAT_DTYPES:
            raise HFImportError(f"{self.path}: {name}: unsupported dtype {dt} "
                                "(F32, F16 or BF16)")
        if have != shape:
            raise HFImportError(f"{self.path}: {name}: shape {have}, expected {shape}")
        if dt == "BF16":
            return _widen_bf16(self._bf16_bytes(name), shape)
        return self._f.get_tensor(name).astype(np.float32)

    def _bf16_bytes(self, name: str) -> bytearray:
        """The raw bytes of BF16 tensor ``name``. With framework="numpy" the package raises
        TypeError for BF16 (numpy has no bfloat16), so the first BF16 request reads this whole
        file with ``safetensors.deserialize``, which returns every tensor's raw bytes; each
        is dropped once handed out, and asking again reads the file again
        (see docs/model-tools.md)."""
        if self._bf16 is None or name not in self._bf16:
            try:
                data = self.path.read_bytes()
                tensors = deserialize(data)
            except OSError as e:
                raise HFImportError(read_problem(self.path, e)) from None
            except SafetensorError as e:
                raise HFImportError(f"{self.path}: not a valid safetensors file ({e})") from None
            self._bf16 = {n: t["data"] for n, t in tensors if t["dtype"] == "BF16"}
        return self._bf16.pop(name)


def _read_index(path: Path) -> dict[str, str]:
    """The ``weight_map`` of a ``model.safetensors.index.json``: tensor name -> shard file
    name (a plain name, in the index's folder)."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise HFImportError(read_problem(path, e)) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HFImportError(f"{path}: bad safetensors index (not JSON)") from None
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict):
        raise HFImportError(f"{path}: bad safetensors index (no weight_map object)")
    for name, shard in wmap.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard:
            raise HFImportError(f"{path}: bad safetensors index (weight_map[{name!r}] = "
                                f"{shard!r} is not a file name in the same folder)")
    return wmap


def resolve_weights(path: str | Path) -> Path:
    """The file ``--weights`` names: a ``.safetensors`` file, an index ``.json``, or for a
    folder its ``model.safetensors`` (else its ``model.safetensors.index.json``), the order
    in which Hugging Face looks."""
    p = Path(path)
    if not p.exists():
        raise HFImportError(f"{p}: no such file or folder")
    if not p.is_dir():
        return p
    for name in (SINGLE_FILE, INDEX_FILE):
        if (p / name).is_file():
            return p / name
    raise HFImportError(f"{p}: folder has neither {SINGLE_FILE} nor {INDEX_FILE}")


class HFWeights:
    """The tensors of a Hugging Face checkpoint, one file or sharded: use as a context
    manager (it keeps every shard open). Opening checks that every shard exists and holds
    the tensors the index lists in it, so these errors come before any output is written."""

    def __init__(self, path: str | Path) -> None:
        self.path = resolve_weights(path)
        self._stack = ExitStack()
        try:
            self._where = self._open()
        except BaseException:
            self._stack.close()
            raise

    def _open(self) -> dict[str, Shard]:
        """Tensor name -> the open file that holds it."""
        if self.path.name.endswith(".json"):
            return self._open_index()
        shard = Shard(self.path, self._stack)
        return dict.fromkeys(shard.names, shard)

    def _open_index(self) -> dict[str, Shard]:
        wmap = _read_index(self.path)
        shards: dict[str, Shard] = {}
        for name, file in wmap.items():
            if file not in shards:
                if not (self.path.parent / file).is_file():
                    raise HFImportError(f"{self.path}: shard {file} (of tensor {name}) "
                                        "does not exist")
                shards[file] = Shard(self.path.parent / file, self._stack)
            if name not in shards[file].names:
                raise HFImportError(f"{shards[file].path}: missing tensor {name}, which "
                                    f"{self.path.name} places in this shard")
        return {name: shards[file] for name, file in wmap.items()}

    def __enter__(self) -> HFWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as float32, which must have ``shape``."""
        if name not in self._where:
            raise HFImportError(f"{self.path}: missing tensor {name}")
        return self._where[name].get(name, shape)


def _key(cfg: dict[str, Any], name: str, default: Any = None,
         source: str = "config.json") -> Any:
    """``cfg[name]``, or ``default`` when absent or null; HFImportError ``<source>: ...``
    when absent and required (no default)."""
    if name in cfg and cfg[name] is not None:
        return cfg[name]
    if default is None:
        raise HFImportError(f"{source}: missing key {name}")
    return default


def _int(cfg: dict[str, Any], name: str, default: int | None = None,
         source: str = "config.json") -> int:
    """Integer key ``name`` (a JSON integer, not a boolean)."""
    v = _key(cfg, name, default, source)
    if isinstance(v, bool) or not isinstance(v, int):
        raise HFImportError(f"{source}: {name} is {v!r}, not an integer")
    return v


def _float(cfg: dict[str, Any], name: str, default: float | None = None,
           source: str = "config.json") -> float:
    """Number key ``name`` (a JSON number, not a boolean)."""
    v = _key(cfg, name, default, source)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise HFImportError(f"{source}: {name} is {v!r}, not a number")
    return float(v)


def config_from_hf(hf: dict[str, Any], weight_type: str, tied: bool,
                   source: str = "config.json") -> ModelConfig:
    """Map Hugging Face config keys onto a ModelConfig; HFImportError ``<source>: <why>``
    (``source`` is the config file's name) for a missing, mistyped or unsupported key."""
    if hf.get("rope_scaling"):
        raise HFImportError(f"{source}: rope_scaling is not supported")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise HFImportError(f"{source}: hidden_act {act!r} (only silu)")
    heads = _int(hf, "num_attention_heads", source=source)
    dim = _int(hf, "hidden_size", source=source)
    if hf.get("head_dim") is not None and _int(hf, "head_dim", source=source) * heads != dim:
        raise HFImportError(f"{source}: head_dim {hf['head_dim']} != hidden_size / heads")
    cfg = ModelConfig(
        dim=dim, hidden_dim=_int(hf, "intermediate_size", source=source),
        n_layers=_int(hf, "num_hidden_layers", source=source), n_heads=heads,
        n_kv_heads=_int(hf, "num_key_value_heads", heads, source),
        vocab_size=_int(hf, "vocab_size", source=source),
        max_seq_len=_int(hf, "max_position_embeddings", source=source),
        weight_type=WEIGHT_TYPES[weight_type], group_size=64, tied_embeddings=tied,
        rope_theta=_float(hf, "rope_theta", 10000.0, source),
        norm_eps=_float(hf, "rms_norm_eps", source=source),
    )
    try:
        cfg.validate()
    except CheckpointError as e:
        raise HFImportError(f"{source}: {e}") from None
    return cfg


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a Hugging Face ``config.json``; HFImportError ``<path>: <why>``
    for a file that cannot be read, is empty, is not UTF-8 JSON or not a JSON object."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise HFImportError(read_problem(path, e)) from None
    if not data.strip():
        raise HFImportError(f"{path}: empty file, not a Hugging Face config.json")
    try:
        hf = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise HFImportError(f"{path}: not a Hugging Face config.json (not UTF-8 "
                            "text)") from None
    except json.JSONDecodeError as e:
        raise HFImportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} "
                            f"column {e.colno})") from None
    if not isinstance(hf, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean"}.get(
            type(hf), "a number" if isinstance(hf, int | float) else "null")
        raise HFImportError(f"{path}: not a Hugging Face config.json (JSON {kind}, not "
                            "an object)")
    return hf


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

    ``weights_path`` is a ``.safetensors`` file, a ``model.safetensors.index.json`` or a
    folder holding either. ``tie_word_embeddings`` decides the classifier (absent: tied
    iff there is no ``lm_head.weight``). Raises HFImportError (a CheckpointError) for a
    missing key, tensor or shard, a bad index, an unsupported dtype or a shape mismatch."""
    t0 = time.perf_counter()
    if weight_type not in WEIGHT_TYPES:
        raise HFImportError(f"unknown weight type {weight_type!r} (int8 or f32)")
    hf = read_hf_config(config_path)
    with HFWeights(weights_path) as st:
        tied = hf.get("tie_word_embeddings")
        tied = (HF_NAMES["classifier"] not in st) if tied is None else bool(tied)
        cfg = config_from_hf(hf, weight_type, tied, str(config_path))
        _write(st, cfg, out)
    return ImportResult(str(out), cfg, checkpoint_size(cfg), time.perf_counter() - t0)


def _write(st: HFWeights, cfg: ModelConfig, out: str | Path) -> None:
    """Stream every section of the checkpoint from ``st`` to ``out`` (nothing left on error)."""
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
