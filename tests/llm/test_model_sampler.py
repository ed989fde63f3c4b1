"""The xorshift64* sampler (nexos.model.sampler) against the formula in Python ints."""

import numpy as np

from nexos.model.sampler import XorShift64Star, sample

M64 = (1 << 64) - 1


def reference_u32(state, n):
    out = []
    for _ in range(n):
        state ^= state >> 12
        state ^= (state << 25) & M64
        state ^= state >> 27
        out.append(((state * 0x2545F4914F6CDD1D) & M64) >> 32)
    return out


def test_xorshift_first_outputs():
    for seed in (1, 42, 0xDEADBEEFCAFEF00D):
        rng = XorShift64Star(seed)
        assert [rng.next_u32() for _ in range(6)] == reference_u32(seed, 6)
    zero = XorShift64Star(0)
    assert [zero.next_u32() for _ in range(3)] == reference_u32(0x9E3779B97F4A7C15, 3)


def test_coin_range_and_value():
    rng = XorShift64Star(7)
    first = reference_u32(7, 1)[0]
    assert rng.coin() == (first >> 8) / 16777216.0
    coins = [rng.coin() for _ in range(1000)]
    assert 0.0 <= min(coins) and max(coins) < 1.0 and 0.4 < np.mean(coins) < 0.6


def test_greedy_takes_lowest_index_on_tie():
    assert sample(np.array([0.0, 3.0, 1.0, 3.0], np.float32), 0.0, XorShift64Star(1)) == 1


def test_temperature_draw_follows_cdf():
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    seed = 99
    coins = [(u >> 8) / 16777216.0 for u in reference_u32(seed, 200)]
    want = [0 if c < 0.1 else 1 if c < 0.3 else 2 for c in coins]
    rng = XorShift64Star(seed)
    got = [sample(logits, 1.0, rng) for _ in range(200)]
    # the cdf is float32; only coins within 1e-6 of a boundary could differ
    close = [abs(c - 0.1) < 1e-6 or abs(c - 0.3) < 1e-6 for c in coins]
    assert all(g == w or c for g, w, c in zip(got, want, close))
    assert len(set(got)) == 3


def test_softmax_is_the_c_loop():
    """softmax_f32 = smolprobe's loop: expf correctly rounded, sum left to right."""
    import math

    from nexos.model.sampler import exp_f32, softmax_f32
    z = (np.random.default_rng(3).standard_normal(3000) * 4).astype(np.float32)
    m = z.max()
    e = [np.float32(math.exp(float(np.float32(v - m)))) for v in z]
    total = np.float32(0.0)
    for v in e:
        total = np.float32(total + v)
    want = np.array([np.float32(v / total) for v in e], dtype=np.float32)
    assert np.array_equal(exp_f32(z - m), np.array(e, dtype=np.float32))
    assert np.array_equal(softmax_f32(z), want)
