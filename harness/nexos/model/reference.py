"""The numpy float32 reference forward pass (docs/checkpoint.md) and generation loop.

``smolprobe`` implements the same computation in C; with an int8 checkpoint the matrix
products here quantize their input vector exactly as the C code does (quant.matvec_int8).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nexos.model.format import Block, Checkpoint, QuantBlock, block_row, load_checkpoint
from nexos.model.quant import matvec_int8
from nexos.model.sampler import XorShift64Star, sample

F32 = np.float32
DEFAULT_SEQ_LEN = 256  # smolprobe's runtime_seq_len


class RequestError(ValueError):
    """A generation request the model cannot serve (bad tokens or lengths)."""


def matvec(w: Block, x: np.ndarray) -> np.ndarray:
    """``w · x`` as float32: int8 blocks via the exact quantized product."""
    if isinstance(w, QuantBlock):
        return matvec_int8(w.q, w.s, x, w.group_size)
    return (w @ x).astype(F32)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``w * (x / sqrt(mean(x²) + eps))`` in float32."""
    ss = F32(np.dot(x, x)) / F32(x.size) + F32(eps)
    return (w * (x * (F32(1.0) / np.sqrt(ss)))).astype(F32)


def silu(x: np.ndarray) -> np.ndarray:
    return (x / (F32(1.0) + np.exp(-x))).astype(F32)


class Transformer:
    """A checkpoint plus its run state: a float32 KV cache ``[layer][seq][kv_dim]``."""

    def __init__(self, ckpt: Checkpoint, seq_len: int) -> None:
        cfg = ckpt.config
        self.ckpt, self.cfg, self.seq_len = ckpt, cfg, seq_len
        self.key_cache = np.zeros((cfg.n_layers, seq_len, cfg.kv_dim), dtype=F32)
        self.value_cache = np.zeros((cfg.n_layers, seq_len, cfg.kv_dim), dtype=F32)
        half = cfg.head_dim // 2
        i2 = np.arange(half, dtype=F32) * F32(2.0)
        self._freq = np.power(F32(cfg.rope_theta), -i2 / F32(cfg.head_dim)).astype(F32)

    def rope(self, v: np.ndarray, n_heads: int, pos: int) -> np.ndarray:
        """Half-rotation RoPE of each head of ``v`` [n_heads*head_dim] at ``pos``."""
        hd = self.cfg.head_dim
        h = v.reshape(n_heads, hd)
        angle = (F32(pos) * self._freq).astype(F32)
        c, s = np.cos(angle).astype(F32), np.sin(angle).astype(F32)
        a, b = h[:, : hd // 2], h[:, hd // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=1).reshape(-1).astype(F32)

    def attention(self, layer: int, q: np.ndarray, pos: int) -> np.ndarray:
        """Grouped-query attention of ``q`` over cache rows ``0..pos`` of ``layer``."""
        cfg = self.cfg
        hd, kvh = cfg.head_dim, cfg.n_kv_heads
        grp = cfg.n_heads // kvh
        k = self.key_cache[layer, : pos + 1].reshape(pos + 1, kvh, hd)
        v = self.value_cache[layer, : pos + 1].reshape(pos + 1, kvh, hd)
        qh = q.reshape(kvh, grp, hd)  # query head h uses kv head h // grp
        scores = np.einsum("kgd,tkd->kgt", qh, k).astype(F32) / F32(np.sqrt(hd))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True)).astype(F32)
        scores /= scores.sum(axis=-1, keepdims=True)
        return np.einsum("kgt,tkd->kgd", scores, v).reshape(-1).astype(F32)

    def forward(self, token: int, pos: int, want_logits: bool = True) -> np.ndarray | None:
        """Feed ``token`` at ``pos`` (fills cache row ``pos``); the logits [vocab] or None."""
        ck, cfg = self.ckpt, self.cfg
        x = block_row(ck.tok_embedding, token).copy()
        for i in range(cfg.n_layers):
            lw = {name: blocks[i] for name, blocks in ck.layers.items()}
            xb = rmsnorm(x, ck.rms_att[i], cfg.norm_eps)
            q = self.rope(matvec(lw["wq"], xb), cfg.n_heads, pos)
            self.key_cache[i, pos] = self.rope(matvec(lw["wk"], xb), cfg.n_kv_heads, pos)
            self.value_cache[i, pos] = matvec(lw["wv"], xb)
            x += matvec(lw["wo"], self.attention(i, q, pos))
            xb = rmsnorm(x, ck.rms_ffn[i], cfg.norm_eps)
            h = silu(matvec(lw["w_gate"], xb)) * matvec(lw["w_up"], xb)
            x += matvec(lw["w_down"], h.astype(F32))
        if not want_logits:
            return None
        assert ck.classifier is not None
        return matvec(ck.classifier, rmsnorm(x, ck.rms_final, cfg.norm_eps))


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
             seed: int = 0) -> GenerationResult:
    """Run ``prompt_tokens`` through the model, then generate ``gen_len`` tokens.

    ``seq_len`` (the KV cache rows) defaults to ``min(256, max_seq_len)``, smolprobe's default.
    docs/checkpoint.md "Generation": prompt token ``i`` is fed at position ``i``; the logits
    after a token give the next one; every one of the ``P+G`` tokens is fed (the last
    generated one too), so ``P+G`` KV rows are written, and ``final_logits`` are the logits
    of that last forward (position ``P+G-1``)."""
    ckpt = model if isinstance(model, Checkpoint) else load_checkpoint(model)
    prompt = [int(t) for t in prompt_tokens]
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, ckpt.config.max_seq_len)
    check_request(ckpt, prompt, gen_len, seq_len)
    t0 = time.perf_counter()
    tf, rng = Transformer(ckpt, seq_len), XorShift64Star(seed)
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
