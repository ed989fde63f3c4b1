"""GGUF's Q8_0 and Q4_1 weight blocks: storage, dequantisation and the integer matvec.

A NexOS checkpoint keeps these blocks exactly as a GGUF file stores them
(docs/checkpoint.md "Q8_0 and Q4_1 blocks"): a matrix ``[rows][cols]`` is ``rows`` rows of
``cols / 32`` blocks, each block 32 consecutive values of a row:

- Q8_0, 34 bytes: f16 ``d``, then 32 int8 ``q``;            ``w[j] = d * q[j]``
- Q4_1, 20 bytes: f16 ``d``, f16 ``m``, then 16 bytes whose low nibbles are ``q[0..15]``
  and high nibbles ``q[16..31]`` (``q`` in 0..15);        ``w[j] = d * q[j] + m``

Dequantisation and quantisation are the ``gguf`` package's (``gguf.quants``). The integer
matvec (``QMatrix.matvec``) is the arithmetic of docs/checkpoint.md "Quantized matvec in
integers": activations quantised to int8 per block of 32, per-block integer dot products,
block scales as 15-bit fixed-point integers with one power-of-two exponent per row (weights)
or per vector (activations), an exact int64 accumulator per row and one float conversion
per row. It is exact integer arithmetic up to that conversion, so any summation order gives
the same bits; the C code in smolprobe must produce the same float32 results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gguf import GGMLQuantizationType, quants

from nexos.model.quant import quantize as quantize_int8

QK = 32  # values per block (GGML's QK8_0 = QK4_1 = 32)
FIX_BITS = 15  # the largest scale of a row / vector lands in [2^14, 2^15) before rounding
MAX_X_SHIFT = 64  # cap on the activation exponent (docs/checkpoint.md: keeps 2^-T normal)

Q8_0 = "q8_0"
Q4_1 = "q4_1"
BLOCK_BYTES = {Q8_0: 34, Q4_1: 20}
GGML_TYPES = {Q8_0: GGMLQuantizationType.Q8_0, Q4_1: GGMLQuantizationType.Q4_1}


def row_bytes(kind: str, cols: int) -> int:
    """Bytes of one row of ``cols`` values (``cols`` a multiple of 32)."""
    return cols // QK * BLOCK_BYTES[kind]


@dataclass
class GGMLBlock:
    """A matrix stored as Q8_0 or Q4_1 blocks: ``raw`` is uint8 ``[rows, row_bytes]``."""

    kind: str  # Q8_0 or Q4_1
    raw: np.ndarray
    cols: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.raw.shape[0], self.cols)

    def dequantize(self) -> np.ndarray:
        """The float32 weights: Q8_0 ``d*q`` (exact), Q4_1 ``d*q + m`` (``d*q`` exact, one
        rounding in the add), as gguf.quants computes them."""
        return quants.dequantize(np.asarray(self.raw), GGML_TYPES[self.kind])

    def row(self, r: int) -> np.ndarray:
        """Dequantized row ``r`` (float32), e.g. one token's embedding."""
        return quants.dequantize(np.asarray(self.raw[r: r + 1]), GGML_TYPES[self.kind])[0]


def quantize_blocks(w: np.ndarray, kind: str) -> np.ndarray:
    """Float weights ``[rows, cols]`` -> the raw blocks (gguf.quants, as llama.cpp does)."""
    return quants.quantize(np.ascontiguousarray(w, dtype=np.float32), GGML_TYPES[kind])


# ---------------------------------------------------------------------- block fields

@dataclass
class BlockFields:
    """The parts of every block of a matrix: ``d`` (and ``m``) as f16 bit patterns
    ``[rows, nb]``, ``q`` ``[rows, nb, 32]`` (int8 for Q8_0, uint8 0..15 for Q4_1)."""

    d_bits: np.ndarray
    m_bits: np.ndarray | None
    q: np.ndarray


def block_fields(blk: GGMLBlock) -> BlockFields:
    """Split the raw blocks into their fields (the nibble order of the module docstring)."""
    rows, cols = blk.shape
    nb = cols // QK
    b = np.asarray(blk.raw).reshape(rows, nb, BLOCK_BYTES[blk.kind])
    d = np.ascontiguousarray(b[:, :, 0:2]).view("<u2")[..., 0]
    if blk.kind == Q8_0:
        return BlockFields(d, None, np.ascontiguousarray(b[:, :, 2:]).view(np.int8))
    m = np.ascontiguousarray(b[:, :, 2:4]).view("<u2")[..., 0]
    nib = b[:, :, 4:]
    q = np.concatenate([nib & np.uint8(0x0F), nib >> np.uint8(4)], axis=2)
    return BlockFields(d, m, q)


# ---------------------------------------------------------------------- fixed point

def _f16_parts(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f16 bit patterns -> (sign ±1, mantissa, p) with ``|v| = mantissa * 2^p`` exactly."""
    b = bits.astype(np.int64)
    e, f = (b >> 10) & 0x1F, b & 0x3FF
    if np.any(e == 0x1F):
        raise ValueError("a block scale is infinite or NaN")
    mant = np.where(e > 0, f | 0x400, f)
    p = np.where(e > 0, e - 25, -24)
    return np.where(b >> 15, -1, 1), mant, p


def _f32_parts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 values -> (sign ±1, mantissa, p) with ``|v| = mantissa * 2^p`` exactly."""
    b = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.int64)
    e, f = (b >> 23) & 0xFF, b & 0x7FFFFF
    mant = np.where(e > 0, f | 0x800000, f)
    p = np.where(e > 0, e - 150, -149)
    return np.where(b >> 31, -1, 1), mant, p


def _floor_log2(mant: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``floor(log2(mant * 2^p))`` for mant > 0; a very small number where mant == 0."""
    bitlen = np.zeros(mant.shape, dtype=np.int64)
    m = mant.copy()
    for s in (16, 8, 4, 2, 1):  # bit length of values below 2^32
        big = m >= (1 << s)
        bitlen += np.where(big, s, 0)
        m = np.where(big, m >> s, m)
    bitlen += (m > 0)
    return np.where(mant > 0, bitlen - 1 + p, np.iinfo(np.int32).min)


def shift_for(k_max: np.ndarray) -> np.ndarray:
    """The exponent ``e = 14 - k_max`` that puts the largest value in [2^14, 2^15); 0 for an
    all-zero set (``k_max`` is the very small number of ``_floor_log2``)."""
    return np.where(k_max > np.iinfo(np.int32).min, (FIX_BITS - 1) - k_max, 0)


def to_fixed(sign: np.ndarray, mant: np.ndarray, p: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``sign * round_half_away(mant * 2^(p+e))`` in exact integer arithmetic (int64)."""
    s = p + e
    up = mant << np.clip(s, 0, 62)
    n = np.clip(-s, 1, 62)
    down = (mant + (np.int64(1) << (n - 1))) >> n
    return sign * np.where(s >= 0, up, down)


@dataclass
class QMatrix:
    """A Q8_0/Q4_1 matrix prepared once for the integer matvec: weights ``q`` as
    ``[rows, nb, 32]``, the scales ``D`` (and mins ``M``) as int64 fixed point with the
    per-row exponent ``ew``: ``d = D * 2^-ew`` up to the rounding of ``to_fixed``."""

    kind: str
    q: np.ndarray
    D: np.ndarray  # [rows, nb] int64, |D| <= 2^15 - 16 (an int16)
    M: np.ndarray | None  # [rows, nb] int64 (Q4_1), |M| <= 2^15 - 16
    ew: np.ndarray  # [rows] int64
    # q as float32, for the block dot products: every product of a weight (|q| <= 128)
    # and an activation (|q| <= 127) and every partial sum of 32 of them is an integer
    # below 2^19, so float32 adds them exactly, in any order, at BLAS speed
    qf: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.qf = self.q.astype(np.float32)

    @classmethod
    def prepare(cls, blk: GGMLBlock) -> QMatrix:
        f = block_fields(blk)
        parts = [_f16_parts(f.d_bits)] + ([_f16_parts(f.m_bits)] if f.m_bits is not None
                                          else [])
        k_row = np.max([_floor_log2(mant, p).max(axis=1) for _, mant, p in parts], axis=0)
        ew = shift_for(k_row)
        fixed = [to_fixed(sg, mant, p, ew[:, None]) for sg, mant, p in parts]
        return cls(blk.kind, f.q, fixed[0], fixed[1] if len(fixed) > 1 else None, ew)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.q.shape[0], self.q.shape[1] * QK)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``W x`` in the integer arithmetic of docs/checkpoint.md; float32 [rows]."""
        xa = quantize_activations(x)
        isum = np.einsum("rbk,bk->rb", self.qf, xa.q.astype(np.float32)).astype(np.int64)
        t = self.D * isum  # Q8_0: |t| < 2^34; Q4_1 (with the min term): |t| < 2^31
        if self.M is not None:
            t += self.M * xa.qsum
        acc = (t * xa.X).sum(axis=1)  # exact: |acc| < (cols/32) * 2^49 <= 2^62
        scale = np.ldexp(np.float32(1.0), -(xa.ex + self.ew)).astype(np.float32)
        return (acc.astype(np.float32) * scale).astype(np.float32)


@dataclass
class QActivations:
    """An activation vector quantised for one matvec: ``q`` int8 ``[nb, 32]``, the
    per-block sums ``qsum`` of ``q``, the scales ``X`` in fixed point with exponent ``ex``."""

    q: np.ndarray
    qsum: np.ndarray  # [nb] int64
    X: np.ndarray  # [nb] int64, |X| <= 2^15
    ex: int


def quantize_activations(x: np.ndarray) -> QActivations:
    """Quantise ``x`` [cols] per block of 32 by the int8 rule (``s = max|x|/127``,
    ``q = roundf(x/s)``), then the scales ``s`` to fixed point (docs/checkpoint.md)."""
    x = np.asarray(x, dtype=np.float32)
    q, s = quantize_int8(x, QK)
    q = q.reshape(-1, QK)
    sign, mant, p = _f32_parts(s)
    ex = int(min(int(shift_for(_floor_log2(mant, p).max())), MAX_X_SHIFT))
    X = to_fixed(sign, mant, p, np.int64(ex))
    return QActivations(q, q.sum(axis=1, dtype=np.int64), X, ex)
