"""The NexOS checkpoint file (docs/checkpoint.md): header, layout, reader and writer.

A checkpoint is a 256-byte header then the tensors back to back, in the order that
``layout()`` lists. The writer streams: it takes one section at a time, in file order, and
checks every shape against the layout, so that a partial or misordered file is impossible.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nexos.model.quant import dequantize, quantize

MAGIC = b"NEXOSLM\0"
VERSION = 1
HEADER_SIZE = 256
WEIGHT_F32 = 0
WEIGHT_INT8 = 1
WEIGHT_NAMES = {WEIGHT_F32: "f32", WEIGHT_INT8: "int8"}
DEFAULT_GROUP_SIZE = 64

# magic, version, dim, hidden, layers, heads, kv_heads, vocab, max_seq, wtype, group, tied,
# rope_theta, norm_eps  (offsets 0..59, see docs/checkpoint.md)
_HEADER_STRUCT = struct.Struct("<8s11I2f")

# The per-layer matrices, in file order (each one section per layer).
LAYER_BLOCKS = ("wq", "wk", "wv", "wo", "w_gate", "w_down", "w_up")


class CheckpointError(Exception):
    """A checkpoint file (or a config about to be written) is invalid; the message says why."""


def _f32(v: float) -> float:
    """``v`` rounded to float32 precision (the header stores f32)."""
    return float(np.float32(v))


@dataclass
class ModelConfig:
    """Every header field. ``rope_theta``/``norm_eps`` are kept at float32 precision so that
    a config read back from a file compares equal to the one written."""

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    max_seq_len: int
    weight_type: int = WEIGHT_INT8
    group_size: int = DEFAULT_GROUP_SIZE
    tied_embeddings: bool = True
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        self.rope_theta = _f32(self.rope_theta)
        self.norm_eps = _f32(self.norm_eps)
        self.tied_embeddings = bool(self.tied_embeddings)
        if self.weight_type == WEIGHT_F32:
            self.group_size = 0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def weight_name(self) -> str:
        return WEIGHT_NAMES.get(self.weight_type, f"unknown({self.weight_type})")

    def validate(self) -> None:
        """Raise CheckpointError unless the config is one the format supports."""
        sizes = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                 "max_seq_len")
        for name in sizes:
            v = getattr(self, name)
            if not 0 < v < 2**31:
                raise CheckpointError(f"config: {name} = {v} is out of range")
        if self.dim % self.n_heads:
            raise CheckpointError(f"config: dim {self.dim} is not a multiple of n_heads "
                                  f"{self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise CheckpointError(f"config: n_heads {self.n_heads} is not a multiple of "
                                  f"n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise CheckpointError(f"config: head_dim {self.head_dim} is odd (RoPE needs pairs)")
        if self.weight_type not in WEIGHT_NAMES:
            raise CheckpointError(f"config: unknown weight_type {self.weight_type}")
        if self.weight_type == WEIGHT_INT8:
            g = self.group_size
            if g <= 0 or self.dim % g or self.hidden_dim % g:
                raise CheckpointError(f"config: int8 group_size {g} does not divide dim "
                                      f"{self.dim} and hidden_dim {self.hidden_dim}")
        if not (np.isfinite(self.rope_theta) and self.rope_theta > 0):
            raise CheckpointError(f"config: rope_theta {self.rope_theta} must be > 0")
        if not (np.isfinite(self.norm_eps) and self.norm_eps >= 0):
            raise CheckpointError(f"config: norm_eps {self.norm_eps} must be >= 0")


def pack_header(cfg: ModelConfig) -> bytes:
    """The 256-byte header for ``cfg`` (validated first)."""
    cfg.validate()
    head = _HEADER_STRUCT.pack(
        MAGIC, VERSION, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
        cfg.vocab_size, cfg.max_seq_len, cfg.weight_type, cfg.group_size,
        int(cfg.tied_embeddings), cfg.rope_theta, cfg.norm_eps,
    )
    return head + bytes(HEADER_SIZE - len(head))


def unpack_header(data: bytes) -> ModelConfig:
    """Parse and validate a header; raises CheckpointError on a bad magic/version/config."""
    if len(data) < HEADER_SIZE:
        raise CheckpointError(f"truncated header: {len(data)} bytes, need {HEADER_SIZE}")
    f = _HEADER_STRUCT.unpack_from(data)
    if f[0] != MAGIC:
        raise CheckpointError(f"bad magic {f[0]!r} (expected {MAGIC!r}): not a NexOS checkpoint")
    if f[1] != VERSION:
        raise CheckpointError(f"unsupported format version {f[1]} (this tool reads {VERSION})")
    if f[11] not in (0, 1):
        raise CheckpointError(f"config: tied_embeddings must be 0 or 1, not {f[11]}")
    cfg = ModelConfig(
        dim=f[2], hidden_dim=f[3], n_layers=f[4], n_heads=f[5], n_kv_heads=f[6],
        vocab_size=f[7], max_seq_len=f[8], weight_type=f[9], group_size=f[10],
        tied_embeddings=bool(f[11]), rope_theta=f[12], norm_eps=f[13],
    )
    if cfg.weight_type == WEIGHT_F32 and f[10] != 0:
        cfg.group_size = f[10]  # keep what the file says; the format ignores it for f32
    cfg.validate()
    return cfg


def read_header(path: str | Path) -> ModelConfig:
    """The validated config of the checkpoint at ``path`` (size not checked)."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_SIZE)
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror}") from None
    return unpack_header(data)


# ---------------------------------------------------------------------------- layout

@dataclass(frozen=True)
class Section:
    """One contiguous piece of the file: a norm array (f32) or a weight block."""

    name: str
    layer: int | None  # layer index for per-layer blocks, else None
    shape: tuple[int, ...]
    is_block: bool
    offset: int
    nbytes: int


def block_nbytes(cfg: ModelConfig, rows: int, cols: int) -> int:
    """Bytes of one weight block of ``rows x cols`` values."""
    if cfg.weight_type == WEIGHT_F32:
        return 4 * rows * cols
    return rows * cols + 4 * (rows * cols // cfg.group_size)


def _block_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    d, h, q_out = cfg.dim, cfg.hidden_dim, cfg.n_heads * cfg.head_dim
    return {
        "wq": (q_out, d), "wk": (cfg.kv_dim, d), "wv": (cfg.kv_dim, d), "wo": (d, q_out),
        "w_gate": (h, d), "w_down": (d, h), "w_up": (h, d),
    }


def layout(cfg: ModelConfig) -> list[Section]:
    """Every section of the file in order, with byte offsets (the header is bytes 0..255)."""
    items: list[tuple[str, int | None, tuple[int, ...], bool]] = [
        ("rms_att", None, (cfg.n_layers, cfg.dim), False),
        ("rms_ffn", None, (cfg.n_layers, cfg.dim), False),
        ("rms_final", None, (cfg.dim,), False),
        ("tok_embedding", None, (cfg.vocab_size, cfg.dim), True),
    ]
    shapes = _block_shapes(cfg)
    for name in LAYER_BLOCKS:
        items += [(name, i, shapes[name], True) for i in range(cfg.n_layers)]
    if not cfg.tied_embeddings:
        items.append(("classifier", None, (cfg.vocab_size, cfg.dim), True))
    out, off = [], HEADER_SIZE
    for name, layer, shape, is_block in items:
        n = block_nbytes(cfg, *shape) if is_block else 4 * int(np.prod(shape))
        out.append(Section(name, layer, shape, is_block, off, n))
        off += n
    return out


def checkpoint_size(cfg: ModelConfig) -> int:
    """Exact size in bytes of a checkpoint with config ``cfg``."""
    last = layout(cfg)[-1]
    return last.offset + last.nbytes


# ---------------------------------------------------------------------------- reading

@dataclass
class QuantBlock:
    """An int8 weight block: ``W[r][c] ≈ q[r][c] * s[r][c // group_size]``."""

    q: np.ndarray  # int8 [rows, cols]
    s: np.ndarray  # float32 [rows, cols // group_size]
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape  # type: ignore[return-value]

    def dequantize(self) -> np.ndarray:
        return dequantize(self.q, self.s, self.group_size)

    def row(self, r: int) -> np.ndarray:
        """Dequantized row ``r`` (float32), e.g. one token's embedding."""
        return dequantize(self.q[r], self.s[r], self.group_size)


Block = np.ndarray | QuantBlock


def block_row(block: Block, r: int) -> np.ndarray:
    """Row ``r`` of a block as float32."""
    if isinstance(block, QuantBlock):
        return block.row(r)
    return np.asarray(block[r], dtype=np.float32)


def as_float(block: Block) -> np.ndarray:
    """The whole block as float32 (dequantized when int8)."""
    if isinstance(block, QuantBlock):
        return block.dequantize()
    return np.asarray(block, dtype=np.float32)


@dataclass
class Checkpoint:
    """A loaded checkpoint: arrays are read-only views of the mapped file."""

    config: ModelConfig
    rms_att: np.ndarray  # [n_layers, dim]
    rms_ffn: np.ndarray  # [n_layers, dim]
    rms_final: np.ndarray  # [dim]
    tok_embedding: Block  # [vocab, dim]
    layers: dict[str, list[Block]] = field(default_factory=dict)  # LAYER_BLOCKS -> per layer
    classifier: Block | None = None  # the embedding itself when tied
    path: str = ""


def _view_block(cfg: ModelConfig, buf: np.ndarray, sec: Section) -> Block:
    rows, cols = sec.shape
    n = rows * cols
    if cfg.weight_type == WEIGHT_F32:
        return np.frombuffer(buf, "<f4", n, sec.offset).reshape(rows, cols)
    q = np.frombuffer(buf, np.int8, n, sec.offset).reshape(rows, cols)
    s = np.frombuffer(buf, "<f4", n // cfg.group_size, sec.offset + n)
    return QuantBlock(q, s.reshape(rows, cols // cfg.group_size), cfg.group_size)


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Map the checkpoint at ``path`` and return views of all its tensors.

    Raises CheckpointError for a missing file, bad magic/version/config, or a size that
    differs from the size the header implies (truncated or extended file)."""
    cfg = read_header(path)
    want, have = checkpoint_size(cfg), os.path.getsize(path)
    if have != want:
        what = "truncated" if have < want else "has extra bytes"
        raise CheckpointError(f"{path}: file is {have} bytes but its header implies {want} "
                              f"({what})")
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    views: dict[str, object] = {}
    layers: dict[str, list[Block]] = {name: [] for name in LAYER_BLOCKS}
    for sec in layout(cfg):
        if not sec.is_block:
            views[sec.name] = np.frombuffer(buf, "<f4", int(np.prod(sec.shape)),
                                            sec.offset).reshape(sec.shape)
        elif sec.layer is not None:
            layers[sec.name].append(_view_block(cfg, buf, sec))
        else:
            views[sec.name] = _view_block(cfg, buf, sec)
    emb = views["tok_embedding"]
    return Checkpoint(
        config=cfg, rms_att=views["rms_att"], rms_ffn=views["rms_ffn"],  # type: ignore[arg-type]
        rms_final=views["rms_final"], tok_embedding=emb,  # type: ignore[arg-type]
        layers=layers, classifier=views.get("classifier", emb),  # type: ignore[arg-type]
        path=str(path),
    )


# ---------------------------------------------------------------------------- writing

class CheckpointWriter:
    """Streams a checkpoint to ``path``: call ``put(name, array)`` once per section in file
    order (norms as whole arrays, per-layer blocks once per layer), then ``close()``.

    Arrays are float32 values; blocks are quantized here for int8 checkpoints. The file is
    written under a temporary name and renamed only when complete, so an error never leaves
    a half-written checkpoint behind."""

    def __init__(self, path: str | Path, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.path = Path(path)
        self._tmp = self.path.with_name(self.path.name + ".partial")
        header = pack_header(cfg)
        self._todo = layout(cfg)
        self._next = 0
        try:
            self._f = open(self._tmp, "wb")
        except OSError as e:
            raise CheckpointError(f"cannot write {self.path}: {e.strerror}") from None
        self._f.write(header)

    def put(self, name: str, array: np.ndarray) -> None:
        """Write the next section, which must be called ``name`` and have its shape."""
        if self._next >= len(self._todo):
            raise CheckpointError(f"writer: unexpected extra section {name}")
        sec = self._todo[self._next]
        a = np.asarray(array, dtype=np.float32)
        if sec.name != name or tuple(a.shape) != sec.shape:
            raise CheckpointError(f"writer: expected {sec.name} {sec.shape}, got {name} "
                                  f"{tuple(a.shape)}")
        if sec.is_block and self.cfg.weight_type == WEIGHT_INT8:
            q, s = quantize(a, self.cfg.group_size)
            self._f.write(q.tobytes())
            self._f.write(s.astype("<f4").tobytes())
        else:
            self._f.write(a.astype("<f4").tobytes())
        self._next += 1

    def close(self) -> None:
        """Finish: checks every section was written and the size is exact, then renames."""
        self._f.close()
        if self._next != len(self._todo):
            self.abort()
            missing = self._todo[self._next]
            raise CheckpointError(f"writer: closed before section {missing.name}")
        size = os.path.getsize(self._tmp)
        if size != checkpoint_size(self.cfg):
            self.abort()
            raise CheckpointError(f"writer: wrote {size} bytes, expected "
                                  f"{checkpoint_size(self.cfg)}")
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial file."""
        if not self._f.closed:
            self._f.close()
        if self._tmp.exists():
            self._tmp.unlink()


def write_checkpoint(path: str | Path, cfg: ModelConfig,
                     tensors: dict[str, object]) -> None:
    """Write a whole checkpoint from float arrays: ``tensors`` maps ``rms_att``, ``rms_ffn``,
    ``rms_final``, ``tok_embedding``, each of LAYER_BLOCKS (a list or stacked array, one
    matrix per layer) and, when untied, ``classifier``."""
    w = CheckpointWriter(path, cfg)
    try:
        for sec in w._todo:
            t = tensors.get(sec.name)
            if t is None:
                raise CheckpointError(f"missing tensor {sec.name}")
            w.put(sec.name, t[sec.layer] if sec.layer is not None else t)  # type: ignore[index]
        w.close()
    except BaseException:
        w.abort()
        raise
