"""The NexOS checkpoint file (docs/checkpoint.md): header, layout, reader and writer.

A checkpoint is a 256-byte header then the tensors, in the order that ``layout()`` lists.
Version 1 (float32 or int8 weights, no tokenizer; the synthetic model) packs them back to back;
version 2 adds a per-tensor type table after the header (float32, int8, and GGUF's Q8_0 and
Q4_1 blocks, qblocks.py), aligns every section to 32 bytes and may end with an opaque
tokenizer blob. The writer streams: it takes one section at a time, in file order, and
checks every shape against the layout, so that a partial or misordered file is impossible.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nexos.model.qblocks import BLOCK_BYTES, Q4_1, Q8_0, QK, GGMLBlock, quantize_blocks
from nexos.model.quant import dequantize, quantize

MAGIC = b"NEXOSLM\0"
VERSION = 1  # float32 / int8 files without a tokenizer (smolprobe reads both versions)
VERSION_TYPED = 2  # per-tensor type table, 32-byte aligned sections, optional tokenizer
VERSION_PREPARED = 3  # version 2's layout, weights prepared for smolprobe (prepared.py)
VERSIONS = (VERSION, VERSION_TYPED, VERSION_PREPARED)
HEADER_SIZE = 256
ALIGN = 32  # version 2: every section starts at a multiple of this
WEIGHT_F32 = 0
WEIGHT_INT8 = 1
WEIGHT_Q8_0 = 2
WEIGHT_Q4_1 = 3
WEIGHT_PER_TENSOR = 255  # version 2 header: the types are in the type table
WEIGHT_NAMES = {WEIGHT_F32: "f32", WEIGHT_INT8: "int8", WEIGHT_Q8_0: Q8_0, WEIGHT_Q4_1: Q4_1}
V1_WEIGHT_TYPES = (WEIGHT_F32, WEIGHT_INT8)
GGML_WEIGHTS = {WEIGHT_Q8_0: Q8_0, WEIGHT_Q4_1: Q4_1}
DEFAULT_GROUP_SIZE = 64
MAX_Q_COLS = 2**18  # Q8_0/Q4_1 rows: the integer matvec's int64 accumulator bound

# magic, version, dim, hidden, layers, heads, kv_heads, vocab, max_seq, wtype, group, tied,
# rope_theta, norm_eps  (offsets 0..59, see docs/checkpoint.md)
_HEADER_STRUCT = struct.Struct("<8s11I2f")
# version 2 only: n_blocks, align, tokenizer_size (offsets 60..71)
_V2_STRUCT = struct.Struct("<3I")
_V2_OFFSET = _HEADER_STRUCT.size

# The per-layer matrices, in file order (each one section per layer).
LAYER_BLOCKS = ("wq", "wk", "wv", "wo", "w_gate", "w_down", "w_up")


class CheckpointError(Exception):
    """A checkpoint file (or a config about to be written) is invalid; the message says why.
    An error about a file the user gave starts with that file's name: ``<file>: <why>``."""


def read_problem(path: str | Path, e: OSError) -> str:
    """``<path>: cannot read (<reason>)`` for an OSError met opening or reading ``path``."""
    return f"{path}: cannot read ({e.strerror or e})"


def _f32(v: float) -> float:
    """``v`` rounded to float32 precision (the header stores f32)."""
    return float(np.float32(v))


def align_up(n: int) -> int:
    """n rounded up to a multiple of ALIGN (the section alignment of versions 2 and 3)."""
    return -(-n // ALIGN) * ALIGN


def n_blocks(n_layers: int, tied: bool) -> int:
    """Weight blocks in a checkpoint: the embedding, 7 per layer, the untied classifier."""
    return 1 + len(LAYER_BLOCKS) * n_layers + (0 if tied else 1)


@dataclass
class ModelConfig:
    """Every header field. ``rope_theta``/``norm_eps`` are kept at float32 precision so that
    a config read back from a file compares equal to the one written.

    ``tensor_types`` (version 2) holds one weight type per block in file order
    (``block_order``); ``weight_type`` is then WEIGHT_PER_TENSOR. A config made with
    ``weight_type`` Q8_0/Q4_1, or with a tokenizer, is turned into that form (every block
    of the one type). Empty ``tensor_types`` with float32/int8: a version 1 file."""

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
    tensor_types: tuple[int, ...] = ()
    tokenizer_size: int = 0
    prepared: bool = False  # version 3: the weights prepared (nexos.model.prepared)

    def __post_init__(self) -> None:
        self.rope_theta = _f32(self.rope_theta)
        self.norm_eps = _f32(self.norm_eps)
        self.tied_embeddings = bool(self.tied_embeddings)
        self.tensor_types = tuple(int(t) for t in self.tensor_types)
        uniform = self.weight_type in GGML_WEIGHTS or (
            self.tokenizer_size and self.weight_type in V1_WEIGHT_TYPES)
        if uniform and not self.tensor_types:
            self.tensor_types = (self.weight_type,) * n_blocks(self.n_layers,
                                                               self.tied_embeddings)
            self.weight_type = WEIGHT_PER_TENSOR
        if self.weight_type == WEIGHT_F32 or (
                self.tensor_types and WEIGHT_INT8 not in self.tensor_types):
            self.group_size = 0

    @property
    def version(self) -> int:
        """The format version of a file with this config."""
        if self.weight_type != WEIGHT_PER_TENSOR:
            return VERSION
        return VERSION_PREPARED if self.prepared else VERSION_TYPED

    def block_types(self) -> list[int]:
        """The weight type of every block, in file order."""
        if self.tensor_types:
            return list(self.tensor_types)
        return [self.weight_type] * n_blocks(self.n_layers, self.tied_embeddings)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def weight_name(self) -> str:
        """``int8``, ``f32``, or for version 2 the types present joined by ``+`` in file
        order (the real SmolLM2 GGUF import: ``q8_0+q4_1``)."""
        if self.weight_type != WEIGHT_PER_TENSOR:
            return WEIGHT_NAMES.get(self.weight_type, f"unknown({self.weight_type})")
        seen = dict.fromkeys(WEIGHT_NAMES.get(t, f"unknown({t})") for t in self.tensor_types)
        return "+".join(seen)

    @property
    def weight_counts(self) -> dict[str, int]:
        """Weight type name -> number of blocks of that type, in file order of first use
        (SmolLM2 from its GGUF: ``{"q8_0": 1, "q4_1": 210}``): a short form of the type
        table for display."""
        counts: dict[str, int] = {}
        for t in self.block_types():
            name = WEIGHT_NAMES.get(t, f"unknown({t})")
            counts[name] = counts.get(name, 0) + 1
        return counts

    def _validate_types(self) -> None:
        if self.weight_type != WEIGHT_PER_TENSOR:
            if self.weight_type not in V1_WEIGHT_TYPES:
                raise CheckpointError(f"config: unknown weight_type {self.weight_type}")
            if self.tensor_types:
                raise CheckpointError("config: tensor_types need weight_type "
                                      f"{WEIGHT_PER_TENSOR} (per tensor)")
            return
        want = n_blocks(self.n_layers, self.tied_embeddings)
        if len(self.tensor_types) != want:
            raise CheckpointError(f"config: {len(self.tensor_types)} tensor types for "
                                  f"{want} weight blocks")
        cols = {"tok_embedding": self.dim, "classifier": self.dim, "w_down": self.hidden_dim,
                "wo": self.n_heads * self.head_dim}
        for (name, layer), t in zip(block_order(self), self.tensor_types, strict=True):
            where = name if layer is None else f"{name}[{layer}]"
            if t not in WEIGHT_NAMES:
                raise CheckpointError(f"config: {where}: unknown weight type {t}")
            c = cols.get(name, self.dim)
            if t in GGML_WEIGHTS and (c % QK or c > MAX_Q_COLS):
                raise CheckpointError(f"config: {where}: {WEIGHT_NAMES[t]} needs a row "
                                      f"length that is a multiple of {QK} and at most "
                                      f"{MAX_Q_COLS}, not {c}")

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
        self._validate_types()
        if self.tokenizer_size and self.version == VERSION:
            raise CheckpointError("config: a tokenizer needs a version 2 (per-tensor) file")
        if not 0 <= self.tokenizer_size < 2**32:
            raise CheckpointError(f"config: tokenizer_size {self.tokenizer_size} is out of "
                                  "range")
        if WEIGHT_INT8 in self.block_types():
            g = self.group_size
            if g <= 0 or self.dim % g or self.hidden_dim % g:
                raise CheckpointError(f"config: int8 group_size {g} does not divide dim "
                                      f"{self.dim} and hidden_dim {self.hidden_dim}")
        if not (np.isfinite(self.rope_theta) and self.rope_theta > 0):
            raise CheckpointError(f"config: rope_theta {self.rope_theta} must be > 0")
        if not (np.isfinite(self.norm_eps) and self.norm_eps >= 0):
            raise CheckpointError(f"config: norm_eps {self.norm_eps} must be >= 0")


def table_nbytes(cfg: ModelConfig) -> int:
    """Bytes of the version 2 type table (one u32 per block, zero-padded to ALIGN); 0 for
    version 1."""
    return align_up(4 * len(cfg.tensor_types)) if cfg.version >= VERSION_TYPED else 0


def pack_header(cfg: ModelConfig) -> bytes:
    """The 256-byte header for ``cfg`` (validated first), and for version 2 the type table
    after it: the bytes before the first tensor."""
    cfg.validate()
    head = _HEADER_STRUCT.pack(
        MAGIC, cfg.version, cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads,
        cfg.n_kv_heads, cfg.vocab_size, cfg.max_seq_len, cfg.weight_type, cfg.group_size,
        int(cfg.tied_embeddings), cfg.rope_theta, cfg.norm_eps,
    )
    if cfg.version == VERSION:
        return head + bytes(HEADER_SIZE - len(head))
    head += _V2_STRUCT.pack(len(cfg.tensor_types), ALIGN, cfg.tokenizer_size)
    table = struct.pack(f"<{len(cfg.tensor_types)}I", *cfg.tensor_types)
    return (head + bytes(HEADER_SIZE - len(head)) + table
            + bytes(table_nbytes(cfg) - len(table)))


def _prefix_size(data: bytes) -> int:
    """Bytes of header (and type table) that ``unpack_header`` needs, from the header."""
    (version,) = struct.unpack_from("<I", data, 8)
    if version not in (VERSION_TYPED, VERSION_PREPARED):
        return HEADER_SIZE
    (count,) = struct.unpack_from("<I", data, _V2_OFFSET)
    (layers,) = struct.unpack_from("<I", data, 20)
    (tied,) = struct.unpack_from("<I", data, 48)
    if count != n_blocks(layers, tied == 1):
        return HEADER_SIZE  # unpack_header reports the mismatch; never read a huge table
    return HEADER_SIZE + align_up(4 * count)


def _bad_magic(head: bytes) -> str:
    """Why a file that does not start with MAGIC is refused (a GGUF file is named so)."""
    what = (" (a GGUF file: convert it with 'nexos model import --gguf')"
            if head.startswith(b"GGUF") else "")
    return f"bad magic {head!r} (expected {MAGIC!r}): not a NexOS checkpoint{what}"


def unpack_header(data: bytes) -> ModelConfig:
    """Parse and validate a header (and a version 2 type table); raises CheckpointError on a
    bad magic/version/table/config."""
    if not data:
        raise CheckpointError("empty file: not a NexOS checkpoint")
    if not data.startswith(MAGIC[:len(data)]):  # a short file: a prefix of the magic
        raise CheckpointError(_bad_magic(data[:len(MAGIC)]))
    if len(data) < HEADER_SIZE:
        raise CheckpointError(f"truncated header: {len(data)} bytes, need {HEADER_SIZE}")
    f = _HEADER_STRUCT.unpack_from(data)
    if f[1] not in VERSIONS:
        raise CheckpointError(f"unsupported format version {f[1]} (this tool reads "
                              f"{VERSION}, {VERSION_TYPED} and {VERSION_PREPARED})")
    if f[11] not in (0, 1):
        raise CheckpointError(f"config: tied_embeddings must be 0 or 1, not {f[11]}")
    types: tuple[int, ...] = ()
    tok_size = 0
    if f[1] >= VERSION_TYPED:
        count, align, tok_size = _V2_STRUCT.unpack_from(data, _V2_OFFSET)
        if f[9] != WEIGHT_PER_TENSOR:
            raise CheckpointError(f"config: version {f[1]} needs weight_type "
                                  f"{WEIGHT_PER_TENSOR} (per tensor), not {f[9]}")
        if align != ALIGN:
            raise CheckpointError(f"config: section alignment {align}, expected {ALIGN}")
        want = n_blocks(f[4], bool(f[11]))
        if count != want:
            raise CheckpointError(f"config: type table has {count} entries, the model has "
                                  f"{want} weight blocks")
        if len(data) < HEADER_SIZE + 4 * count:
            raise CheckpointError(f"truncated type table: {len(data)} bytes, need "
                                  f"{HEADER_SIZE + 4 * count}")
        types = struct.unpack_from(f"<{count}I", data, HEADER_SIZE)
    elif f[9] not in V1_WEIGHT_TYPES:
        raise CheckpointError(f"config: unknown weight_type {f[9]} for version {VERSION} "
                              "(0 = float32, 1 = int8)")
    cfg = ModelConfig(
        dim=f[2], hidden_dim=f[3], n_layers=f[4], n_heads=f[5], n_kv_heads=f[6],
        vocab_size=f[7], max_seq_len=f[8], weight_type=f[9], group_size=f[10],
        tied_embeddings=bool(f[11]), rope_theta=f[12], norm_eps=f[13],
        tensor_types=types, tokenizer_size=tok_size, prepared=f[1] == VERSION_PREPARED,
    )
    if cfg.group_size == 0 and f[10] != 0:
        cfg.group_size = f[10]  # keep what the file says; the format ignores it here
    cfg.validate()
    return cfg


def read_header(path: str | Path) -> ModelConfig:
    """The validated config of the checkpoint at ``path`` (size not checked). Raises
    CheckpointError ``<path>: <why>`` for a file that cannot be read (missing, a folder,
    no permission) or whose header or type table is invalid."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_SIZE)
            if len(data) == HEADER_SIZE and data[:8] == MAGIC:
                room = os.fstat(f.fileno()).st_size - HEADER_SIZE  # never ask for more
                data += f.read(min(_prefix_size(data) - HEADER_SIZE, room))
    except OSError as e:
        raise CheckpointError(read_problem(path, e)) from None
    try:
        return unpack_header(data)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None


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
    wtype: int = WEIGHT_F32  # the weight type of a block (norms are float32)


def block_nbytes(cfg: ModelConfig, rows: int, cols: int, wtype: int | None = None) -> int:
    """Bytes of one weight block of ``rows x cols`` values of type ``wtype`` (default: the
    header's ``weight_type``)."""
    wtype = cfg.weight_type if wtype is None else wtype
    if wtype == WEIGHT_F32:
        return 4 * rows * cols
    if wtype in GGML_WEIGHTS:
        return rows * (cols // QK) * BLOCK_BYTES[GGML_WEIGHTS[wtype]]
    return rows * cols + 4 * (rows * cols // cfg.group_size)


def _block_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    d, h, q_out = cfg.dim, cfg.hidden_dim, cfg.n_heads * cfg.head_dim
    return {
        "wq": (q_out, d), "wk": (cfg.kv_dim, d), "wv": (cfg.kv_dim, d), "wo": (d, q_out),
        "w_gate": (h, d), "w_down": (d, h), "w_up": (h, d),
    }


def block_order(cfg: ModelConfig) -> list[tuple[str, int | None]]:
    """(name, layer) of every weight block in file order: the order of the type table."""
    order: list[tuple[str, int | None]] = [("tok_embedding", None)]
    for name in LAYER_BLOCKS:
        order += [(name, i) for i in range(cfg.n_layers)]
    if not cfg.tied_embeddings:
        order.append(("classifier", None))
    return order


def layout(cfg: ModelConfig) -> list[Section]:
    """Every tensor section of the file in order, with byte offsets: version 1 back to back
    from byte 256; version 2 from the end of the type table, each at a multiple of ALIGN.
    (The tokenizer blob of a version 2 file follows: ``tokenizer_offset``.)"""
    items: list[tuple[str, int | None, tuple[int, ...], bool, int]] = [
        ("rms_att", None, (cfg.n_layers, cfg.dim), False, WEIGHT_F32),
        ("rms_ffn", None, (cfg.n_layers, cfg.dim), False, WEIGHT_F32),
        ("rms_final", None, (cfg.dim,), False, WEIGHT_F32),
    ]
    shapes = _block_shapes(cfg)
    shapes["tok_embedding"] = shapes["classifier"] = (cfg.vocab_size, cfg.dim)
    for (name, layer), wtype in zip(block_order(cfg), cfg.block_types(), strict=True):
        items.append((name, layer, shapes[name], True, wtype))
    aligned = cfg.version >= VERSION_TYPED
    out, off = [], HEADER_SIZE + table_nbytes(cfg)
    for name, layer, shape, is_block, wtype in items:
        n = block_nbytes(cfg, *shape, wtype) if is_block else 4 * int(np.prod(shape))
        off = align_up(off) if aligned else off
        out.append(Section(name, layer, shape, is_block, off, n, wtype))
        off += n
    return out


def derived_nbytes(cfg: ModelConfig) -> int:
    """Bytes of version 3's derived section, after the tensors (docs/checkpoint.md): for
    each Q8_0/Q4_1 block, the embedding's f16 scales first, then its row exponents (one
    int8 a row), each padded to ALIGN. 0 for versions 1 and 2."""
    if not cfg.prepared:
        return 0
    n = 0
    for sec in layout(cfg):
        if sec.is_block and sec.wtype in GGML_WEIGHTS:
            rows, cols = sec.shape
            if sec.name == "tok_embedding":
                per = 2 if GGML_WEIGHTS[sec.wtype] == Q4_1 else 1
                n += align_up(rows * (cols // QK) * per * 2)
            n += align_up(rows)
    return n


def tensors_end(cfg: ModelConfig) -> int:
    """Where the tensors end: the last section's end, and for version 3 its derived section
    (which starts at the next multiple of ALIGN)."""
    last = layout(cfg)[-1]
    end = last.offset + last.nbytes
    return align_up(end) + derived_nbytes(cfg) if cfg.prepared else end


def tokenizer_offset(cfg: ModelConfig) -> int:
    """Where the tokenizer blob starts (versions 2 and 3: the first multiple of ALIGN after
    the tensors; meaningful only when ``tokenizer_size > 0``)."""
    return align_up(tensors_end(cfg))


def checkpoint_size(cfg: ModelConfig) -> int:
    """Exact size in bytes of a checkpoint with config ``cfg``."""
    if cfg.tokenizer_size:
        return tokenizer_offset(cfg) + cfg.tokenizer_size
    return tensors_end(cfg)


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


Block = np.ndarray | QuantBlock | GGMLBlock


def block_row(block: Block, r: int) -> np.ndarray:
    """Row ``r`` of a block as float32."""
    if isinstance(block, QuantBlock | GGMLBlock):
        return block.row(r)
    return np.asarray(block[r], dtype=np.float32)


def as_float(block: Block) -> np.ndarray:
    """The whole block as float32 (dequantized when int8, Q8_0 or Q4_1)."""
    if isinstance(block, QuantBlock | GGMLBlock):
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
    tokenizer: bytes | None = None  # the opaque tokenizer blob of a version 2 file


def _view_block(cfg: ModelConfig, buf: np.ndarray, sec: Section) -> Block:
    rows, cols = sec.shape
    n = rows * cols
    if sec.wtype == WEIGHT_F32:
        return np.frombuffer(buf, "<f4", n, sec.offset).reshape(rows, cols)
    if sec.wtype in GGML_WEIGHTS:
        raw = np.frombuffer(buf, np.uint8, sec.nbytes, sec.offset).reshape(rows, -1)
        return GGMLBlock(GGML_WEIGHTS[sec.wtype], raw, cols)
    q = np.frombuffer(buf, np.int8, n, sec.offset).reshape(rows, cols)
    s = np.frombuffer(buf, "<f4", n // cfg.group_size, sec.offset + n)
    return QuantBlock(q, s.reshape(rows, cols // cfg.group_size), cfg.group_size)


def check_size(path: str | Path, cfg: ModelConfig) -> None:
    """CheckpointError ``<path>: ...`` unless the file at ``path`` has exactly the size its
    header ``cfg`` implies (a truncated or extended file)."""
    want = checkpoint_size(cfg)
    try:
        have = os.path.getsize(path)
    except OSError as e:
        raise CheckpointError(read_problem(path, e)) from None
    if have != want:
        what = "truncated" if have < want else "has extra bytes"
        raise CheckpointError(f"{path}: file is {have} bytes but its header implies {want} "
                              f"({what})")


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Map the checkpoint at ``path`` and return views of all its tensors.

    Raises CheckpointError for a missing file, bad magic/version/type table/config, or a
    size that differs from the size the header implies (truncated or extended file)."""
    cfg = read_header(path)
    if cfg.prepared:
        raise CheckpointError(f"{path}: a version 3 checkpoint holds the weights prepared for "
                              "smolprobe (nexos model prepare); the Python tools read the "
                              "version 1 or 2 file it was made from")
    check_size(path, cfg)
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
    tok = None
    if cfg.tokenizer_size:
        start = tokenizer_offset(cfg)
        tok = bytes(buf[start: start + cfg.tokenizer_size])
    emb = views["tok_embedding"]
    return Checkpoint(
        config=cfg, rms_att=views["rms_att"], rms_ffn=views["rms_ffn"],  # type: ignore[arg-type]
        rms_final=views["rms_final"], tok_embedding=emb,  # type: ignore[arg-type]
        layers=layers, classifier=views.get("classifier", emb),  # type: ignore[arg-type]
        path=str(path), tokenizer=tok,
    )


# ---------------------------------------------------------------------------- writing

class CheckpointWriter:
    """Streams a checkpoint to ``path``: call ``put(name, array)`` once per section in file
    order (norms as whole arrays, per-layer blocks once per layer), then, when the config
    has ``tokenizer_size``, ``put_tokenizer(blob)``, then ``close()``.

    Arrays are float32 values, quantized here to the section's weight type (int8 by
    quant.py, Q8_0/Q4_1 by the ``gguf`` package); ``put_raw`` takes Q8_0/Q4_1 blocks as they
    are. The file is written under a temporary name and renamed only when complete, so an
    error never leaves a half-written checkpoint behind."""

    def __init__(self, path: str | Path, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.path = Path(path)
        self._tmp = self.path.with_name(self.path.name + ".partial")
        header = pack_header(cfg)
        self._todo = layout(cfg)
        self._next = 0
        self._tokenizer_done = cfg.tokenizer_size == 0
        try:
            self._f = open(self._tmp, "wb")
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot write ({e.strerror or e})") from None
        self._f.write(header)

    def _next_section(self, name: str, shape: tuple[int, ...] | None) -> Section:
        if self._next >= len(self._todo):
            raise CheckpointError(f"writer: unexpected extra section {name}")
        sec = self._todo[self._next]
        if sec.name != name or (shape is not None and shape != sec.shape):
            got = "" if shape is None else f" {shape}"
            raise CheckpointError(f"writer: expected {sec.name} {sec.shape}, got {name}{got}")
        self._f.write(bytes(sec.offset - self._f.tell()))  # version 2 alignment padding
        return sec

    def put(self, name: str, array: np.ndarray) -> None:
        """Write the next section, which must be called ``name`` and have its shape."""
        a = np.asarray(array, dtype=np.float32)
        sec = self._next_section(name, tuple(a.shape))
        if sec.is_block and sec.wtype == WEIGHT_INT8:
            q, s = quantize(a, self.cfg.group_size)
            self._f.write(q.tobytes())
            self._f.write(s.astype("<f4").tobytes())
        elif sec.is_block and sec.wtype in GGML_WEIGHTS:
            self._f.write(quantize_blocks(a, GGML_WEIGHTS[sec.wtype]).tobytes())
        else:
            self._f.write(a.astype("<f4").tobytes())
        self._next += 1

    def put_raw(self, name: str, raw: np.ndarray) -> None:
        """Write the next section, a Q8_0/Q4_1 block, from its raw bytes (as GGUF has them:
        uint8 ``[rows, row_bytes]``), unchanged."""
        raw = np.asarray(raw)
        sec = self._next_section(name, None)
        if sec.wtype not in GGML_WEIGHTS:
            raise CheckpointError(f"writer: {name} is {WEIGHT_NAMES[sec.wtype]}, not a "
                                  "Q8_0/Q4_1 block")
        if raw.dtype != np.uint8 or raw.shape[0] != sec.shape[0] or raw.nbytes != sec.nbytes:
            raise CheckpointError(f"writer: {name}: {raw.dtype} {raw.shape} is not "
                                  f"{sec.nbytes} bytes of {sec.shape[0]} rows")
        self._f.write(np.ascontiguousarray(raw).tobytes())
        self._next += 1

    def put_tokenizer(self, blob: bytes) -> None:
        """Write the tokenizer blob, after every tensor; its length must be the config's
        ``tokenizer_size``."""
        if self._next != len(self._todo) or self._tokenizer_done:
            raise CheckpointError("writer: the tokenizer comes once, after every tensor")
        if len(blob) != self.cfg.tokenizer_size:
            raise CheckpointError(f"writer: tokenizer is {len(blob)} bytes, the header says "
                                  f"{self.cfg.tokenizer_size}")
        self._f.write(bytes(tokenizer_offset(self.cfg) - self._f.tell()))
        self._f.write(blob)
        self._tokenizer_done = True

    def close(self) -> None:
        """Finish: checks every section was written and the size is exact, then renames."""
        self._f.close()
        if self._next != len(self._todo) or not self._tokenizer_done:
            self.abort()
            missing = (self._todo[self._next].name if self._next < len(self._todo)
                       else "tokenizer")
            raise CheckpointError(f"writer: closed before section {missing}")
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
    matrix per layer), when untied ``classifier``, and with a tokenizer ``tokenizer``
    (bytes)."""
    w = CheckpointWriter(path, cfg)
    try:
        for sec in w._todo:
            t = tensors.get(sec.name)
            if t is None:
                raise CheckpointError(f"missing tensor {sec.name}")
            w.put(sec.name, t[sec.layer] if sec.layer is not None else t)  # type: ignore[index]
        if cfg.tokenizer_size:
            blob = tensors.get("tokenizer")
            if not isinstance(blob, bytes | bytearray):
                raise CheckpointError("missing tokenizer (bytes)")
            w.put_tokenizer(bytes(blob))
        w.close()
    except BaseException:
        w.abort()
        raise
