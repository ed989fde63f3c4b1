"""Int8 group quantization, bit-exact with smolprobe's C code.

Rules (docs/checkpoint.md, "Int8 arithmetic"):

- A group is ``group_size`` consecutive values along a row.
- ``s = float32(max|w|) / 127`` computed in float32 (a division, not a multiply by 1/127).
- ``q = round_half_away_from_zero(w / s)`` with ``w / s`` a float32 division (C: ``roundf``),
  clamped to [-127, 127]. If ``s == 0`` every ``q`` of the group is 0.
- Activations are quantized with the same rule, group by group.
- A quantized dot product: for each row, ``acc = 0.0f``; for each group ``g`` in order,
  ``isum = sum(int32(qw) * int32(qx))`` (exact in int32), then
  ``acc += (float)isum * (sw_g * sx_g)``: the product ``sw_g * sx_g`` rounded to float32, its
  product with ``(float)isum`` rounded to float32, then added (no fused multiply-add).
"""

from __future__ import annotations

import numpy as np

QMAX = 127
_CHUNK_GROUPS = 1 << 18  # groups quantized per numpy pass, bounds temporary memory


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest integer, halves away from zero (C ``roundf``).

    Returns float32 integers; exact for every float32 input (no float64 detour needed:
    ``x - trunc(x)`` is exact in binary floating point).
    """
    x = np.asarray(x, dtype=np.float32)
    r = np.rint(x)  # halves to even
    t = np.trunc(x)
    tie = np.abs(x - t) == np.float32(0.5)
    return np.where(tie, t + np.sign(x), r).astype(np.float32)


def _quantize_2d(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize rows of ``g`` (float32 [n, group_size]); returns (q int8 [n, gs], s f32 [n])."""
    amax = np.abs(g).max(axis=1)
    s = (amax / np.float32(QMAX)).astype(np.float32)
    safe = np.where(s == 0, np.float32(1.0), s).astype(np.float32)
    ratio = (g / safe[:, None]).astype(np.float32)
    q = np.clip(round_half_away(ratio), -QMAX, QMAX).astype(np.int8)
    q[s == 0] = 0
    return q, s


def quantize(w: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Group-quantize ``w`` (any shape whose last axis is a multiple of ``group_size``).

    Returns ``(q, s)``: ``q`` int8 with the shape of ``w``, ``s`` float32 with the last axis
    divided by ``group_size``. Works in chunks so that big matrices need little extra memory.
    """
    w = np.ascontiguousarray(w, dtype=np.float32)
    if w.shape[-1] % group_size:
        raise ValueError(f"last axis {w.shape[-1]} is not a multiple of group {group_size}")
    flat = w.reshape(-1, group_size)
    q = np.empty(flat.shape, dtype=np.int8)
    s = np.empty(flat.shape[0], dtype=np.float32)
    for lo in range(0, flat.shape[0], _CHUNK_GROUPS):
        hi = lo + _CHUNK_GROUPS
        q[lo:hi], s[lo:hi] = _quantize_2d(flat[lo:hi])
    return q.reshape(w.shape), s.reshape(w.shape[:-1] + (w.shape[-1] // group_size,))


def dequantize(q: np.ndarray, s: np.ndarray, group_size: int) -> np.ndarray:
    """Float32 values ``q * s`` (each product rounded to float32), shaped like ``q``."""
    g = q.reshape(-1, group_size).astype(np.float32) * s.reshape(-1, 1)
    return g.astype(np.float32).reshape(q.shape)


def matvec_int8(
    q: np.ndarray, s: np.ndarray, x: np.ndarray, group_size: int
) -> np.ndarray:
    """``W x`` for an int8 block ``W = (q [rows, cols], s [rows, cols/gs])`` and a float32
    vector ``x`` [cols], with ``x`` quantized per group and the exact accumulation order in
    the module docstring. Returns float32 [rows]."""
    rows, cols = q.shape
    ng = cols // group_size
    xq, xs = quantize(x, group_size)
    isum = np.einsum(
        "rgk,gk->rg",
        q.reshape(rows, ng, group_size),
        xq.reshape(ng, group_size),
        dtype=np.int32,
    )
    scale = (s.reshape(rows, ng) * xs.reshape(1, ng)).astype(np.float32)
    terms = (isum.astype(np.float32) * scale).astype(np.float32)
    acc = np.zeros(rows, dtype=np.float32)
    for g in range(ng):  # sequential, as the C loop does
        acc += terms[:, g]
    return acc
