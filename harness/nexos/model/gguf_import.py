"""Import a llama-architecture GGUF model (e.g. SmolLM2-135M-Instruct) as a NexOS checkpoint.

The file is read with the ``gguf`` package's ``GGUFReader``; the llama.* keys give the
config, the GGUF tensor names map onto checkpoint sections (GGUF_NAMES), and the weights
are copied as they are: Q8_0 and Q4_1 blocks unchanged (docs/checkpoint.md, version 2), F16
widened exactly to float32. llama.cpp's converter permutes the rows of attn_q and attn_k
within each head for its adjacent-pair RoPE; NexOS uses the half rotation (docs/checkpoint.md
"The computation the weights define"), so those rows are put back (``unpermute_rows``),
which moves whole rows and so whole blocks: nothing is requantised. See docs/model-tools.md.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, ReaderTensor

from nexos.model.format import (
    GGML_WEIGHTS,
    LAYER_BLOCKS,
    WEIGHT_F32,
    WEIGHT_PER_TENSOR,
    WEIGHT_Q4_1,
    WEIGHT_Q8_0,
    CheckpointError,
    CheckpointWriter,
    ModelConfig,
    block_order,
    checkpoint_size,
    layout,
    n_blocks,
)
from nexos.model.hf_import import ImportResult
from nexos.model.qblocks import GGMLBlock, block_fields

# checkpoint section -> GGUF tensor name ({i} = layer)
GGUF_NAMES = {
    "tok_embedding": "token_embd.weight",
    "rms_att": "blk.{i}.attn_norm.weight",
    "rms_ffn": "blk.{i}.ffn_norm.weight",
    "rms_final": "output_norm.weight",
    "wq": "blk.{i}.attn_q.weight",
    "wk": "blk.{i}.attn_k.weight",
    "wv": "blk.{i}.attn_v.weight",
    "wo": "blk.{i}.attn_output.weight",
    "w_gate": "blk.{i}.ffn_gate.weight",
    "w_down": "blk.{i}.ffn_down.weight",
    "w_up": "blk.{i}.ffn_up.weight",
    "classifier": "output.weight",
}

_T = GGMLQuantizationType
# GGUF tensor type -> checkpoint weight type (F16 is widened to float32)
BLOCK_TYPES = {_T.F32: WEIGHT_F32, _T.F16: WEIGHT_F32, _T.Q8_0: WEIGHT_Q8_0,
               _T.Q4_1: WEIGHT_Q4_1}
SUPPORTED = "F32, F16, Q8_0, Q4_1"


class GGUFImportError(CheckpointError):
    """The GGUF file cannot be imported; the message says which file, key or tensor."""


@dataclass
class GGUFImportResult(ImportResult):
    """What ``import_gguf`` wrote: ImportResult's fields plus where it came from."""

    model_name: str  # general.name of the GGUF ("" when absent)
    source: str  # the GGUF file
    tensor_types: dict[str, int]  # GGUF type name -> tensors of that type in the source

    def describe(self) -> str:
        """One line naming the model, its geometry and its weight types."""
        c = self.config
        name = self.model_name or Path(self.source).name
        types = ", ".join(f"{n} {t}" for t, n in self.tensor_types.items())
        return (f"{name} (llama, {c.n_layers} layers, dim {c.dim}, {c.n_heads}/"
                f"{c.n_kv_heads} heads, vocab {c.vocab_size}, "
                f"{'tied' if c.tied_embeddings else 'untied'} embeddings; {types}) "
                f"-> {self.path} ({self.size} bytes, {c.weight_name})")


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head row permutation of attn_q/attn_k: the converter maps row
    ``j * hd/2 + i`` of a head to row ``2*i + j``; rows here move back. ``w`` is any array
    whose first axis is ``n_heads * head_dim`` rows (float values or raw block bytes)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return (w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


GGUF_HEADER_BYTES = 24  # magic, version, tensor count, key count
# what GGUFReader raises on bytes that are not a well-formed GGUF file (UnicodeDecodeError,
# a bad enum value and "GGUF magic invalid" are ValueErrors)
READER_ERRORS = (ValueError, KeyError, IndexError, TypeError, OverflowError)
_V = GGUFValueType


def _one_line(text: object) -> str:
    """``text`` on one line (a reader's message may hold newlines)."""
    return " ".join(str(text).split())


@functools.lru_cache(maxsize=2)
def _read_gguf(path: str, size: int, mtime_ns: int) -> GGUFReader:
    """GGUFReader on `path`, kept while the file keeps its size and time: making one takes
    seconds (the reader makes a numpy view of every token of the vocabulary), and the
    tokenizer, the import and their tests read the same file several times in a process."""
    return GGUFReader(path)


def open_gguf(path: str | Path) -> GGUFReader:
    """``GGUFReader`` on ``path``; GGUFImportError ``<path>: <why>`` for a missing,
    unreadable, empty, truncated or otherwise invalid file."""
    p = Path(path)
    if p.is_dir():
        raise GGUFImportError(f"{p}: is a folder, not a GGUF file")
    if not p.is_file():
        raise GGUFImportError(f"{p}: no such file")
    st = p.stat()
    size = st.st_size
    try:
        with open(p, "rb") as f:
            head = f.read(GGUF_HEADER_BYTES)
    except OSError as e:
        raise GGUFImportError(f"{p}: cannot read ({e.strerror or e})") from None
    if not head:
        raise GGUFImportError(f"{p}: not a GGUF file (an empty file)")
    if not head.startswith(b"GGUF"[:len(head)]):  # a short file: a prefix of the magic
        what = "a NexOS checkpoint" if head.startswith(b"NEXOSLM") else "bad magic"
        raise GGUFImportError(f"{p}: not a GGUF file ({what})")
    if len(head) < GGUF_HEADER_BYTES:
        raise GGUFImportError(f"{p}: truncated GGUF header ({size} bytes, need "
                              f"{GGUF_HEADER_BYTES})")
    try:
        reader = _read_gguf(str(p.resolve()), size, st.st_mtime_ns)
    except OSError as e:
        raise GGUFImportError(f"{p}: cannot read ({e.strerror or e})") from None
    except READER_ERRORS as e:
        raise GGUFImportError(f"{p}: truncated or corrupt GGUF file ({size} bytes; the gguf "
                              f"reader says: {_one_line(e)})") from None
    if reader.byte_order != "I":
        raise GGUFImportError(f"{p}: a big-endian GGUF file (only little-endian is "
                              "supported)")
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise GGUFImportError(f"{p}: truncated: tensor {t.name} ends at byte "
                                  f"{t.data_offset + t.n_bytes}, the file has {size}")
    return reader


_INT_TYPES = (_V.UINT8, _V.INT8, _V.UINT16, _V.INT16, _V.UINT32, _V.INT32, _V.UINT64,
              _V.INT64)
_FLOAT_TYPES = (_V.FLOAT32, _V.FLOAT64)


class GGUFModel:
    """The keys and tensors of an open GGUF file, with checks that name the file and the key
    or tensor: every accessor raises GGUFImportError ``<path>: <why>``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.reader = open_gguf(path)
        self.tensors: dict[str, ReaderTensor] = {t.name: t for t in self.reader.tensors}

    def has(self, name: str) -> bool:
        """Whether key ``name`` is present."""
        return name in self.reader.fields

    def _field(self, name: str, types: tuple[GGUFValueType, ...], what: str,
               array: bool = False) -> Any:
        """Key ``name``'s field, which must hold ``what``: a value (or with ``array`` an
        array of values) of one of ``types``."""
        f = self.reader.fields[name]
        kind = f.types[-1] if f.types else None
        is_array = bool(f.types) and f.types[0] == _V.ARRAY
        if kind not in types or is_array != array or (array and len(f.types) != 2):
            have = "/".join(t.name for t in f.types) or "nothing"
            raise GGUFImportError(f"{self.path}: key {name} holds {have}, not {what}")
        return f

    def _present(self, name: str, default: Any) -> bool:
        """Whether key ``name`` is there; GGUFImportError when absent and required (no
        ``default``)."""
        if self.has(name):
            return True
        if default is None:
            raise GGUFImportError(f"{self.path}: missing key {name}")
        return False

    def key(self, name: str, default: Any = None) -> Any:
        """The value of key ``name`` whatever its type (``default`` when absent; None: the
        key is required). GGUFImportError when its text is not UTF-8."""
        if not self._present(name, default):
            return default
        try:
            return self.reader.fields[name].contents()
        except (UnicodeDecodeError, IndexError) as e:
            raise GGUFImportError(f"{self.path}: key {name}: unreadable value "
                                  f"({_one_line(e)})") from None

    def int_key(self, name: str, default: int | None = None) -> int:
        """Integer key ``name`` (``default`` when absent; None: the key is required)."""
        if not self._present(name, default):
            return int(default)  # type: ignore[arg-type]
        self._field(name, _INT_TYPES, "an integer")
        return int(self.key(name))

    def float_key(self, name: str, default: float | None = None) -> float:
        """Number key ``name``, float or integer (``default`` when absent)."""
        if not self._present(name, default):
            return float(default)  # type: ignore[arg-type]
        self._field(name, _FLOAT_TYPES + _INT_TYPES, "a number")
        return float(self.key(name))

    def str_key(self, name: str, default: str | None = None) -> str:
        """Text key ``name`` (``default`` when absent)."""
        if not self._present(name, default):
            return str(default)
        self._field(name, (_V.STRING,), "text")
        return str(self.key(name))

    def strings(self, name: str) -> list[str]:
        """String array key ``name`` (required), every string UTF-8."""
        self._present(name, None)
        f = self._field(name, (_V.STRING,), "an array of text", array=True)
        out = []
        for n, i in enumerate(f.data):
            try:
                out.append(bytes(f.parts[i]).decode("utf-8"))
            except UnicodeDecodeError:
                raise GGUFImportError(f"{self.path}: key {name}: item {n} is not UTF-8 "
                                      "text") from None
        return out

    def ints(self, name: str) -> list[int]:
        """Integer array key ``name`` (required)."""
        self._present(name, None)
        f = self._field(name, _INT_TYPES, "an array of integers", array=True)
        return [int(f.parts[i][0]) for i in f.data]

    def tensor(self, name: str, shape: tuple[int, ...], norm: bool = False) -> ReaderTensor:
        """Tensor ``name`` of ``shape`` ([rows, cols]: GGUF lists it the other way round)
        and a supported type (norms: F32 or F16)."""
        t = self.tensors.get(name)
        if t is None:
            raise GGUFImportError(f"{self.path}: missing tensor {name}")
        have = tuple(int(d) for d in reversed(t.shape.tolist()))
        if have != shape:
            raise GGUFImportError(f"{self.path}: {name}: shape {list(have)}, expected "
                                  f"{list(shape)}")
        ok = (_T.F32, _T.F16) if norm else tuple(BLOCK_TYPES)
        if t.tensor_type not in ok:
            want = "F32 or F16" if norm else SUPPORTED
            raise GGUFImportError(f"{self.path}: tensor {name} has type "
                                  f"{t.tensor_type.name}; supported: {want}")
        return t

    def floats(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """An F32/F16 tensor as float32 (F16 widened exactly)."""
        t = self.tensor(name, shape, norm=True)
        return np.asarray(t.data, dtype=np.float32).reshape(shape)


def config_from_gguf(g: GGUFModel) -> ModelConfig:
    """Map the llama.* keys (and the tensor table) onto a ModelConfig."""
    arch = g.str_key("general.architecture", "")
    if arch != "llama":
        raise GGUFImportError(f"{g.path}: general.architecture is {arch!r}; only 'llama' "
                              "is supported")
    scaling = g.str_key("llama.rope.scaling.type", "none")
    if scaling not in ("none", ""):
        raise GGUFImportError(f"{g.path}: llama.rope.scaling.type {scaling!r} is not "
                              "supported")
    emb = g.tensors.get(GGUF_NAMES["tok_embedding"])
    if emb is None:
        raise GGUFImportError(f"{g.path}: missing tensor {GGUF_NAMES['tok_embedding']}")
    if len(emb.shape) != 2:
        raise GGUFImportError(f"{g.path}: {emb.name}: {len(emb.shape)} dimensions, "
                              "expected 2")
    vocab = g.int_key("llama.vocab_size", int(emb.shape[1]))
    dim, heads = g.int_key("llama.embedding_length"), g.int_key("llama.attention.head_count")
    layers = g.int_key("llama.block_count")
    for name, v in (("llama.embedding_length", dim), ("llama.attention.head_count", heads),
                    ("llama.block_count", layers)):
        if v < 1:
            raise GGUFImportError(f"{g.path}: {name} is {v}, must be at least 1")
    if layers * len(LAYER_BLOCKS) > len(g.tensors):  # before any per-layer table is made
        raise GGUFImportError(f"{g.path}: llama.block_count {layers} needs "
                              f"{layers * len(LAYER_BLOCKS)} layer tensors, the file has "
                              f"{len(g.tensors)} tensors")
    rope_dim = g.int_key("llama.rope.dimension_count", dim // heads)
    if rope_dim * heads != dim:
        raise GGUFImportError(f"{g.path}: llama.rope.dimension_count {rope_dim} is not "
                              f"embedding_length / head_count ({dim}/{heads}): partial RoPE "
                              "is not supported")
    tied = GGUF_NAMES["classifier"] not in g.tensors
    cfg = ModelConfig(
        dim=dim, hidden_dim=g.int_key("llama.feed_forward_length"), n_layers=layers,
        n_heads=heads, n_kv_heads=g.int_key("llama.attention.head_count_kv", heads),
        vocab_size=vocab, max_seq_len=g.int_key("llama.context_length"),
        weight_type=WEIGHT_PER_TENSOR, group_size=0, tied_embeddings=tied,
        rope_theta=g.float_key("llama.rope.freq_base", 10000.0),
        norm_eps=g.float_key("llama.attention.layer_norm_rms_epsilon"),
        tensor_types=(WEIGHT_F32,) * n_blocks(layers, tied),
    )
    try:
        cfg.validate()
    except CheckpointError as e:
        raise GGUFImportError(f"{g.path}: {e}") from None
    shapes = {s.name: s.shape for s in layout(cfg) if s.is_block}
    types = []
    for name, layer in block_order(cfg):
        t = g.tensor(GGUF_NAMES[name].format(i=layer), shapes[name])
        types.append(BLOCK_TYPES[t.tensor_type])
    cfg = dataclasses.replace(cfg, tensor_types=tuple(types))
    try:
        cfg.validate()
    except CheckpointError as e:
        raise GGUFImportError(f"{g.path}: {e}") from None
    return cfg


def import_gguf(path: str | Path, out: str | Path,
                tokenizer: bytes | None = None) -> GGUFImportResult:
    """Convert the llama-architecture GGUF file at ``path`` to a NexOS checkpoint at
    ``out`` (version 2: per-tensor types, Q8_0/Q4_1 blocks copied as they are, attn_q/attn_k
    rows un-permuted). ``tokenizer``, if given, is stored as the checkpoint's opaque
    tokenizer blob. Raises GGUFImportError (a CheckpointError) for an unreadable or
    truncated file, another architecture, a missing key or tensor, a shape mismatch or an
    unsupported tensor type; no output file is left behind."""
    t0 = time.perf_counter()
    g = GGUFModel(path)
    cfg = config_from_gguf(g)
    if tokenizer:
        cfg = dataclasses.replace(cfg, tokenizer_size=len(tokenizer))
    _write(g, cfg, out, tokenizer)
    counts: dict[str, int] = {}
    for t in g.reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    name = g.str_key("general.name", "")
    return GGUFImportResult(str(out), cfg, checkpoint_size(cfg), time.perf_counter() - t0,
                            name, str(path), counts)


def _write(g: GGUFModel, cfg: ModelConfig, out: str | Path, tokenizer: bytes | None) -> None:
    """Stream every section from the GGUF file to ``out`` (nothing left on error)."""
    w = CheckpointWriter(out, cfg)
    try:
        for sec in layout(cfg):
            name = GGUF_NAMES[sec.name]
            if sec.name in ("rms_att", "rms_ffn"):
                w.put(sec.name, np.stack([g.floats(name.format(i=i), (cfg.dim,))
                                          for i in range(cfg.n_layers)]))
                continue
            if sec.name == "rms_final":
                w.put(sec.name, g.floats(name, (cfg.dim,)))
                continue
            t = g.tensor(name.format(i=sec.layer), sec.shape)
            data = np.asarray(t.data)
            heads = {"wq": cfg.n_heads, "wk": cfg.n_kv_heads}.get(sec.name)
            if heads is not None:
                data = unpermute_rows(data, heads)
            if sec.wtype == WEIGHT_F32:
                w.put(sec.name, data.astype(np.float32).reshape(sec.shape))
            else:
                _check_scales(g, t, data, sec.shape[1])
                w.put_raw(sec.name, data)
        if tokenizer:
            w.put_tokenizer(tokenizer)
        w.close()
    except BaseException:
        w.abort()
        raise


def _check_scales(g: GGUFModel, t: ReaderTensor, raw: np.ndarray, cols: int) -> None:
    """Every block scale ``d`` (and Q4_1 min ``m``) of a Q8_0/Q4_1 tensor must be finite."""
    f = block_fields(GGMLBlock(GGML_WEIGHTS[BLOCK_TYPES[t.tensor_type]], raw, cols))
    for what, bits in (("scale", f.d_bits), ("min", f.m_bits)):
        if bits is not None and not np.all(np.isfinite(bits.view(np.float16))):
            raise GGUFImportError(f"{g.path}: tensor {t.name} has an infinite or NaN block "
                                  f"{what}")
