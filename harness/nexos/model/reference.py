"""The numpy float32 reference forward pass (docs/checkpoint.md) and generation loop.

``smolprobe`` implements the same computation in C and this module mirrors its arithmetic
operation for operation (docs/checkpoint.md "Float arithmetic, exactly"), so that the two
agree bit for bit: every sum that C takes left to right is a float32 ``cumsum`` here (never
BLAS, ``dot`` or ``einsum``, which sum in other orders), and ``exp``/``sin``/``cos``/``pow``
are computed in float64 and rounded once to float32 (numpy's float32 versions are not
correctly rounded; smolprobe's ``umath.c`` is). With an int8 checkpoint the matrix products
quantize their input vector exactly as the C code does (quant.matvec_int8). Q8_0/Q4_1
blocks (version 2 checkpoints, qblocks.py) run in one of two arithmetics, ``arith``:
``"int"`` (default) the integer matvec of docs/checkpoint.md "Quantized matvec in
integers", which smolprobe's C code is to match bit for bit; ``"float"`` a float32
product over the dequantised weights, the accuracy yardstick (DenseMatrix: BLAS, in BLAS's
order of additions, since smolprobe computes nothing that it should match bit for bit).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nexos.machine.limits import SMOLPROBE_SEQ_LEN
from nexos.model.format import Block, Checkpoint, QuantBlock, block_row, load_checkpoint
from nexos.model.qblocks import GGMLBlock, QMatrix
from nexos.model.quant import matvec_int8
from nexos.model.sampler import XorShift64Star, exp_f32, sample

F32 = np.float32
DEFAULT_SEQ_LEN = SMOLPROBE_SEQ_LEN  # smolprobe's runtime_seq_len
ARITHS = ("int", "float")  # how Q8_0/Q4_1 blocks are multiplied (module docstring)


class RequestError(ValueError):
    """A generation request the model cannot serve (bad tokens or lengths)."""


def seq_sum(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Float32 sum along ``axis`` taken strictly left to right (C: ``s = 0; s += a[i]``)."""
    if a.shape[axis] == 0:
        return np.zeros(np.delete(a.shape, axis), dtype=F32)
    return np.take(np.cumsum(a, axis=axis, dtype=F32), -1, axis=axis)


def f64_round(fn, x: np.ndarray | float) -> np.ndarray:
    """``fn`` evaluated in float64 on float32 ``x``, rounded once to float32 (what a
    correctly rounded float32 libm gives: smolprobe's umath.c)."""
    return np.asarray(fn(np.asarray(x, dtype=F32).astype(np.float64))).astype(F32)


class LaneMatrix:
    """A float32 matrix ``w`` [rows][cols] laid out for smolprobe's float32 matvec, which
    keeps four partial sums per row: ``lanes[k, r, j] = w[r, 4k + j]`` and ``tail`` the
    columns past the last multiple of 4. The layout makes each step of the sum one
    contiguous vector operation over all rows."""

    def __init__(self, w: np.ndarray) -> None:
        rows, cols = w.shape
        n4 = cols // 4 * 4
        self.rows, self.cols = rows, cols
        self.lanes = np.ascontiguousarray(
            np.asarray(w[:, :n4], dtype=F32).reshape(rows, n4 // 4, 4).transpose(1, 0, 2))
        self.tail = np.ascontiguousarray(w[:, n4:], dtype=F32)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``w · x`` exactly as smolprobe's matvec_f32: per row ``a_j = 0``, then for
        k = 0, 1, … ``a_j += w[4k+j]·x[4k+j]`` (product rounded, then the add); the tail
        columns added to ``a_0`` in order; the result ``(a_0 + a_1) + (a_2 + a_3)``."""
        x = np.asarray(x, dtype=F32)
        k4 = self.lanes.shape[0]
        x4 = x[: 4 * k4].reshape(k4, 4)
        acc = np.zeros((self.rows, 4), dtype=F32)
        prod = np.empty_like(acc)
        for k in range(k4):  # k ascending, as the C loop
            np.multiply(self.lanes[k], x4[k], out=prod)
            acc += prod
        a0 = acc[:, 0]
        for i in range(self.tail.shape[1]):
            a0 = a0 + self.tail[:, i] * x[4 * k4 + i]
        return ((a0 + acc[:, 1]) + (acc[:, 2] + acc[:, 3])).astype(F32)


class DenseMatrix:
    """A float32 matrix multiplied by BLAS (the "float" yardstick of a dequantised
    Q8_0/Q4_1 block): about ten times the lane layout's speed, in another order of sums."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = np.ascontiguousarray(w, dtype=F32)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return (self.w @ np.asarray(x, dtype=F32)).astype(F32)


def matvec_f32(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``w · x`` for a float32 matrix, in smolprobe's order (see LaneMatrix.matvec)."""
    return LaneMatrix(w).matvec(x)


def matvec(w: Block | LaneMatrix | DenseMatrix | QMatrix, x: np.ndarray) -> np.ndarray:
    """``w · x`` as float32: int8 blocks via the exact quantized product, Q8_0/Q4_1 blocks
    via the integer matvec (qblocks.QMatrix)."""
    if isinstance(w, QuantBlock):
        return matvec_int8(w.q, w.s, x, w.group_size)
    if isinstance(w, LaneMatrix | DenseMatrix | QMatrix):
        return w.matvec(x)
    if isinstance(w, GGMLBlock):
        return QMatrix.prepare(w).matvec(x)
    return matvec_f32(w, x)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``w * (x * (1 / sqrt(Σx²/n + eps)))`` in float32, Σ left to right."""
    ss = seq_sum((x * x).astype(F32)) / F32(x.size) + F32(eps)
    inv = F32(1.0) / np.sqrt(F32(ss))
    return (w * (x * inv)).astype(F32)


def silu(x: np.ndarray) -> np.ndarray:
    """``x / (1 + expf(-x))`` in float32."""
    return (x / (F32(1.0) + exp_f32(-x))).astype(F32)


def softmax_rows(s: np.ndarray) -> np.ndarray:
    """Softmax along the last axis as smolprobe's softmax: ``expf(s - max)``, the sum left
    to right, then each value divided by it."""
    e = exp_f32(s - s.max(axis=-1, keepdims=True))
    return (e / seq_sum(e)[..., None]).astype(F32)


class Transformer:
    """A checkpoint plus its run state: a float32 KV cache ``[layer][seq][kv_dim]``.
    ``arith`` picks the arithmetic of Q8_0/Q4_1 blocks (ARITHS, module docstring)."""

    def __init__(self, ckpt: Checkpoint, seq_len: int, arith: str = "int") -> None:
        if arith not in ARITHS:
            raise RequestError(f"arith must be one of {', '.join(ARITHS)}, not {arith!r}")
        cfg = ckpt.config
        self.ckpt, self.cfg, self.seq_len, self.arith = ckpt, cfg, seq_len, arith
        self.key_cache = np.zeros((cfg.n_layers, seq_len, cfg.kv_dim), dtype=F32)
        self.value_cache = np.zeros((cfg.n_layers, seq_len, cfg.kv_dim), dtype=F32)
        half = cfg.head_dim // 2
        i2 = np.arange(half, dtype=F32) * F32(2.0)
        expo = (-i2 / F32(cfg.head_dim)).astype(F32)  # C: -((float)i * 2) / (float)hd
        self._freq = f64_round(lambda e: np.power(np.float64(F32(cfg.rope_theta)), e), expo)
        # id(block) -> its prepared form: the lane layout of a float32 block, or a
        # Q8_0/Q4_1 block's QMatrix (arith "int") or dequantised DenseMatrix ("float")
        self._prepared: dict[int, LaneMatrix | DenseMatrix | QMatrix] = {}

    def _prepare(self, w: np.ndarray | GGMLBlock) -> LaneMatrix | DenseMatrix | QMatrix:
        if isinstance(w, GGMLBlock):
            return QMatrix.prepare(w) if self.arith == "int" else DenseMatrix(w.dequantize())
        return LaneMatrix(w)

    def mv(self, w: Block, x: np.ndarray) -> np.ndarray:
        """``w · x``; a float32 or Q8_0/Q4_1 block is prepared once, on first use (the
        checkpoint keeps ``w`` alive, so its id stays valid)."""
        if isinstance(w, QuantBlock):
            return matvec(w, x)
        prep = self._prepared.get(id(w))
        if prep is None:
            prep = self._prepared[id(w)] = self._prepare(w)
        return prep.matvec(x)

    def rope(self, v: np.ndarray, n_heads: int, pos: int) -> np.ndarray:
        """Half-rotation RoPE of each head of ``v`` [n_heads*head_dim] at ``pos``."""
        hd = self.cfg.head_dim
        h = v.reshape(n_heads, hd)
        angle = (F32(pos) * self._freq).astype(F32)
        c, s = f64_round(np.cos, angle), f64_round(np.sin, angle)
        a, b = h[:, : hd // 2], h[:, hd // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=1).reshape(-1).astype(F32)

    def attention(self, layer: int, q: np.ndarray, pos: int) -> np.ndarray:
        """Grouped-query attention of ``q`` over cache rows ``0..pos`` of ``layer``."""
        cfg = self.cfg
        hd, kvh = cfg.head_dim, cfg.n_kv_heads
        grp = cfg.n_heads // kvh
        k = self.key_cache[layer, : pos + 1].reshape(pos + 1, kvh, hd)
        v = self.value_cache[layer, : pos + 1].reshape(pos + 1, kvh, hd)
        qh = q.reshape(kvh, grp, 1, hd)  # query head h uses kv head h // grp
        # scores[k, g, t] = (Σ_i q[i]·k_t[i], left to right) / sqrtf(head_dim)
        dots = seq_sum(qh * k.transpose(1, 0, 2)[:, None], axis=-1)  # [kvh, grp, t]
        att = softmax_rows((dots / np.sqrt(F32(hd))).astype(F32))
        # o = 0; o += a_t · v_t for t = 0..pos in order
        terms = att[..., None] * v.transpose(1, 0, 2)[:, None]  # [kvh, grp, t, hd]
        return seq_sum(terms, axis=2).reshape(-1)

    def forward(self, token: int, pos: int, want_logits: bool = True) -> np.ndarray | None:
        """Feed ``token`` at ``pos`` (fills cache row ``pos``); the logits [vocab] or None."""
        ck, cfg = self.ckpt, self.cfg
        x = block_row(ck.tok_embedding, token).copy()
        for i in range(cfg.n_layers):
            lw = {name: blocks[i] for name, blocks in ck.layers.items()}
            xb = rmsnorm(x, ck.rms_att[i], cfg.norm_eps)
            q = self.rope(self.mv(lw["wq"], xb), cfg.n_heads, pos)
            self.key_cache[i, pos] = self.rope(self.mv(lw["wk"], xb), cfg.n_kv_heads, pos)
            self.value_cache[i, pos] = self.mv(lw["wv"], xb)
            x += self.mv(lw["wo"], self.attention(i, q, pos))
            xb = rmsnorm(x, ck.rms_ffn[i], cfg.norm_eps)
            h = silu(self.mv(lw["w_gate"], xb)) * self.mv(lw["w_up"], xb)
            x += self.mv(lw["w_down"], h.astype(F32))
        if not want_logits:
            return None
        assert ck.classifier is not None
        return self.mv(ck.classifier, rmsnorm(x, ck.rms_final, cfg.norm_eps))


def logits_digest(logits: np.ndarray) -> str:
    """sha256 (hex) of the logits printed ``%.3f`` one per line (``-0.000`` as ``0.000``)."""
    text = "\n".join("0.000" if s == "-0.000" else s for s in (f"{v:.3f}" for v in logits))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class GenerationResult:
    """One generation: ``tokens`` are the ``gen_len`` generated tokens; ``final_logits``
    are the logits of the last forward, after feeding the last generated token at position
    ``positions - 1``."""

    prompt_tokens: list[int]
    tokens: list[int]
    final_logits: np.ndarray
    positions: int  # tokens fed through the model (= KV rows written): len(prompt) + gen_len
    seq_len: int
    temperature: float
    seed: int
    seconds: float
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        self.digest = logits_digest(self.final_logits)

    def to_dict(self) -> dict[str, object]:
        lg = self.final_logits
        return {
            "prompt_tokens": self.prompt_tokens, "tokens": self.tokens,
            "positions": self.positions, "seq_len": self.seq_len,
            "temperature": self.temperature, "seed": self.seed,
            "logits_digest": self.digest, "logits_min": float(lg.min()),
            "logits_max": float(lg.max()), "logits_sum": float(lg.astype(np.float64).sum()),
            "logits_argmax": int(np.argmax(lg)), "seconds": round(self.seconds, 3),
        }


def check_request(ckpt: Checkpoint, prompt: list[int], gen_len: int, seq_len: int) -> None:
    """Raise RequestError unless the model can run this request."""
    cfg = ckpt.config
    if not prompt:
        raise RequestError("the prompt needs at least one token")
    bad = [t for t in prompt if not 0 <= t < cfg.vocab_size]
    if bad:
        raise RequestError(f"token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")
    if gen_len < 1:
        raise RequestError(f"gen_len must be >= 1, not {gen_len}")
    if not 1 <= seq_len <= cfg.max_seq_len:
        raise RequestError(f"seq_len {seq_len} must be in [1, {cfg.max_seq_len}] "
                           "(the model's max_seq_len)")
    if len(prompt) + gen_len > seq_len:
        raise RequestError(f"prompt ({len(prompt)}) + gen_len ({gen_len}) exceeds seq_len "
                           f"{seq_len}")


def generate(model: str | Path | Checkpoint, prompt_tokens: list[int], gen_len: int,
             seq_len: int | None = None, temperature: float = 0.0,
             seed: int = 0, arith: str = "int") -> GenerationResult:
    """Run ``prompt_tokens`` through the model, then generate ``gen_len`` tokens.

    ``seq_len`` (the KV cache rows) defaults to ``min(256, max_seq_len)``, smolprobe's default.
    docs/checkpoint.md "Generation": prompt token ``i`` is fed at position ``i``; the logits
    after a token give the next one; every one of the ``P+G`` tokens is fed (the last
    generated one too), so ``P+G`` KV rows are written, and ``final_logits`` are the logits
    of that last forward (position ``P+G-1``). ``arith`` is the arithmetic of Q8_0/Q4_1
    blocks (ARITHS; int8 and float32 blocks have one arithmetic each)."""
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model)
    prompt = [int(t) for t in prompt_tokens]
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, ckpt.config.max_seq_len)
    check_request(ckpt, prompt, gen_len, seq_len)
    t0 = time.perf_counter()
    tf, rng = Transformer(ckpt, seq_len, arith), XorShift64Star(seed)
    for pos, tok in enumerate(prompt[:-1]):
        tf.forward(tok, pos, want_logits=False)
    out: list[int] = []
    pos = len(prompt) - 1
    logits = tf.forward(prompt[-1], pos)
    while len(out) < gen_len:
        assert logits is not None
        out.append(sample(logits, temperature, rng))
        pos += 1
        logits = tf.forward(out[-1], pos)
    assert logits is not None
    return GenerationResult(prompt, out, logits, pos + 1, seq_len, temperature, seed,
                            time.perf_counter() - t0)


@dataclass
class PerplexityResult:
    """The score of a token sequence: ``nll`` the sum of the ``tokens - 1`` next-token
    negative log-likelihoods (nats), ``ppl`` = expf(nll / (tokens - 1))."""

    tokens: int
    nll: float
    ppl: float
    seconds: float


def token_nll(logits: np.ndarray, nxt: int) -> F32:
    """``-log softmax(logits)[nxt]`` as smolprobe's token_nll: m = max, s = Σ expf(l - m)
    left to right, then ``(m + logf(s)) - l[nxt]``, each step rounded to float32."""
    m = logits.max()
    s = seq_sum(exp_f32((logits - m).astype(F32)))
    lse = F32(m + f64_round(np.log, s))
    return F32(lse - logits[nxt])


def perplexity(model: str | Path | Checkpoint, tokens: list[int], seq_len: int | None = None,
               arith: str = "int") -> PerplexityResult:
    """smolprobe --perplexity (docs/smolprobe.md, "Perplexity"): feed ``tokens`` at
    positions 0..N-1; the logits of position ``i`` score token ``i+1``. The N-1 float32
    NLLs are added in float64 left to right, and ``ppl = expf(float32(nll / (N-1)))``."""
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model)
    toks = [int(t) for t in tokens]
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, ckpt.config.max_seq_len)
    if len(toks) < 2:
        raise RequestError(f"scoring needs at least 2 tokens, not {len(toks)}")
    check_request(ckpt, toks[:-1], 1, seq_len)
    if not 0 <= toks[-1] < ckpt.config.vocab_size:
        raise RequestError(f"token id {toks[-1]} is outside the vocabulary")
    t0 = time.perf_counter()
    tf, nll = Transformer(ckpt, seq_len, arith), 0.0
    for pos, tok in enumerate(toks):
        logits = tf.forward(tok, pos, want_logits=pos < len(toks) - 1)
        if logits is not None:
            nll += float(token_nll(logits, toks[pos + 1]))
    ppl = float(exp_f32(np.asarray(F32(nll / (len(toks) - 1))))[()])
    return PerplexityResult(len(toks), nll, ppl, time.perf_counter() - t0)
