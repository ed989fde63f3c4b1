"""Token sampling, identical to smolprobe's: greedy arg-max, or softmax + xorshift64* coin.

See docs/checkpoint.md "Sampling" for the exact arithmetic the C side mirrors.
"""

from __future__ import annotations

import numpy as np

SEED_FOR_ZERO = 0x9E3779B97F4A7C15
MULTIPLIER = 0x2545F4914F6CDD1D
_U64 = (1 << 64) - 1


class XorShift64Star:
    """The xorshift64* generator; state is a 64-bit unsigned integer, never 0."""

    def __init__(self, seed: int) -> None:
        s = int(seed) & _U64
        self._state = np.array([s if s else SEED_FOR_ZERO], dtype=np.uint64)

    @property
    def state(self) -> int:
        return int(self._state[0])

    def next_u32(self) -> int:
        """Advance the state and return the top 32 bits of ``state * MULTIPLIER``."""
        s = self._state  # array arithmetic wraps modulo 2**64 without warnings
        s ^= s >> np.uint64(12)
        s ^= s << np.uint64(25)
        s ^= s >> np.uint64(27)
        return int(((s * np.uint64(MULTIPLIER)) >> np.uint64(32))[0])

    def coin(self) -> float:
        """A float in [0, 1) with 24 random bits: ``(u32 >> 8) / 2**24``."""
        return (self.next_u32() >> 8) / 16777216.0


def exp_f32(x: np.ndarray) -> np.ndarray:
    """``expf`` of float32 ``x``, correctly rounded like smolprobe's umath.c: computed in
    float64 and rounded once to float32 (numpy's float32 ``exp`` is off by an ulp at times,
    which flips tokens over a long generation)."""
    return np.exp(np.asarray(x, dtype=np.float32).astype(np.float64)).astype(np.float32)


def softmax_f32(z: np.ndarray) -> np.ndarray:
    """Softmax in float32: subtract the max, ``expf``, sum left to right, divide."""
    z = np.asarray(z, dtype=np.float32)
    e = exp_f32(z - z.max())
    total = np.cumsum(e, dtype=np.float32)[-1]  # sequential float32 sum, as the C loop
    return (e / total).astype(np.float32)


def sample(logits: np.ndarray, temperature: float, rng: XorShift64Star) -> int:
    """The next token: arg-max (lowest index on ties) when ``temperature <= 0``; otherwise
    the first index whose float32 running sum of probabilities exceeds one coin."""
    if temperature <= 0.0:
        return int(np.argmax(logits))
    p = softmax_f32(np.asarray(logits, dtype=np.float32) / np.float32(temperature))
    cdf = np.cumsum(p, dtype=np.float32)
    coin = np.float32(rng.coin())
    hit = np.flatnonzero(cdf > coin)
    return int(hit[0]) if hit.size else len(p) - 1
