"""Int8 group quantization and the quantized dot product (nexos.model.quant)."""

import numpy as np

from nexos.model.quant import dequantize, matvec_int8, quantize, round_half_away


def test_round_half_away_from_zero():
    x = np.array([2.5, -2.5, 1.5, 0.5, -0.5, 0.49999997, 2.4999998, -126.5], np.float32)
    assert round_half_away(x).tolist() == [3, -3, 2, 1, -1, 0, 2, -127]


def test_quantize_error_bound_scale_and_zero_groups():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((8, 128)) * rng.uniform(0.001, 3, (8, 1))).astype(np.float32)
    w[3, 64:] = 0.0  # a zero group
    q, s = quantize(w, 64)
    assert q.dtype == np.int8 and s.shape == (8, 2) and s.dtype == np.float32
    assert s[3, 1] == 0 and not q[3, 64:].any()
    groups = w.reshape(-1, 64)
    amax = np.abs(groups).max(axis=1)
    assert np.array_equal(s.reshape(-1), (amax / np.float32(127)).astype(np.float32))
    nz = s.reshape(-1) > 0
    assert np.all(np.abs(q.reshape(-1, 64)).max(axis=1)[nz] == 127)
    err = np.abs(dequantize(q, s, 64) - w).reshape(-1, 64)
    assert np.all(err <= s.reshape(-1, 1) / 2 * (1 + 1e-6))


def test_exact_half_steps_round_away():
    w = np.zeros(64, np.float32)
    w[:5] = [127.0, 2.5, -2.5, 0.5, -0.5]  # s = 1 exactly
    q, s = quantize(w, 64)
    assert s.tolist() == [1.0] and q[:5].tolist() == [127, 3, -3, 1, -1]


def test_matvec_int8_matches_scalar_definition():
    rng = np.random.default_rng(2)
    rows, ng = 16, 12
    w = rng.standard_normal((rows, ng * 64)).astype(np.float32)
    x = rng.standard_normal(ng * 64).astype(np.float32)
    q, s = quantize(w, 64)
    xq, xs = quantize(x, 64)
    got = matvec_int8(q, s, x, 64)
    for r in range(rows):  # the C loop, written out with Python ints and float32 scalars
        acc = np.float32(0.0)
        for g in range(ng):
            isum = sum(int(a) * int(b) for a, b in zip(q[r, g * 64:(g + 1) * 64],
                                                       xq[g * 64:(g + 1) * 64]))
            acc = np.float32(acc + np.float32(isum) * np.float32(s[r, g] * xs[g]))
        assert got[r] == acc
    assert np.allclose(got, w @ x, rtol=0.05, atol=0.5)
