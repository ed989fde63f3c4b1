"""GGUF import, Q8_0/Q4_1 blocks and their integer matvec (nexos.model.gguf_import, qblocks).

Small GGUF files are written with the ``gguf`` package's GGUFWriter (the four tensor types,
llama keys, attn_q/attn_k permuted as llama.cpp's converter does); the imported checkpoint
is checked against a direct float64 forward written here in llama.cpp's own convention
(adjacent-pair RoPE on the permuted rows), and the integer matvec against a scalar
transcription of docs/checkpoint.md "Quantized matvec in integers". The real SmolLM2 GGUF
tests run when the file is present.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from nexos.model import CheckpointError, load_checkpoint
from nexos.model.format import (
    WEIGHT_F32,
    WEIGHT_PER_TENSOR,
    WEIGHT_Q4_1,
    WEIGHT_Q8_0,
    as_float,
    block_order,
)
from nexos.model.gguf_import import GGUFImportError, import_gguf, open_gguf, unpermute_rows
from nexos.model.qblocks import GGMLBlock, QMatrix, quantize_blocks
from nexos.model.reference import Transformer, generate
from support import SMOLLM2_GGUF, needs_smollm2, shared_dir, shared_once

F32 = np.float32


# ---------------------------------------------------------------- small GGUF files

@dataclass
class Geo:
    dim: int = 64
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 96
    ctx: int = 64
    theta: float = 100000.0
    eps: float = 1e-5

    @property
    def hd(self) -> int:
        return self.dim // self.heads


# the GGUF type of each tensor kind: all four types appear in one file
TYPES = {"token_embd": T.Q8_0, "attn_q": T.Q4_1, "attn_k": T.Q8_0, "attn_v": T.F16,
         "attn_output": T.Q4_1, "ffn_gate": T.Q4_1, "ffn_down": T.F32, "ffn_up": T.Q4_1,
         "output": T.Q8_0}


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's ``permute`` of attn_q/attn_k rows (HF -> GGUF)."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def hf_weights(g: Geo, seed: int, tied: bool) -> dict[str, np.ndarray]:
    """Random float weights in Hugging Face layout, GGUF names ([rows, cols])."""
    rng = np.random.default_rng(seed)
    kv = g.kv_heads * g.hd
    shapes = {"attn_q": (g.dim, g.dim), "attn_k": (kv, g.dim), "attn_v": (kv, g.dim),
              "attn_output": (g.dim, g.dim), "ffn_gate": (g.hidden, g.dim),
              "ffn_down": (g.dim, g.hidden), "ffn_up": (g.hidden, g.dim)}
    w = {"token_embd.weight": rng.standard_normal((g.vocab, g.dim)).astype(F32) * F32(0.5),
         "output_norm.weight": (1 + 0.1 * rng.standard_normal(g.dim)).astype(F32)}
    if not tied:
        w["output.weight"] = rng.standard_normal((g.vocab, g.dim)).astype(F32) * F32(0.1)
    for i in range(g.layers):
        for kind, shape in shapes.items():
            gain = 2.0 if kind in ("attn_q", "attn_k") else 1.0
            w[f"blk.{i}.{kind}.weight"] = (rng.standard_normal(shape) * gain
                                            / math.sqrt(shape[1])).astype(F32)
        for norm in ("attn_norm", "ffn_norm"):
            w[f"blk.{i}.{norm}.weight"] = (1 + 0.1 * rng.standard_normal(g.dim)).astype(F32)
    return w


def kind_of(name: str) -> str:
    return name.split(".")[-2]


def write_gguf(path: Path, g: Geo, seed: int = 0, tied: bool = True, arch: str = "llama",
               types: dict[str, T] | None = None) -> dict[str, np.ndarray]:
    """A llama GGUF file of random weights (q/k rows permuted as llama.cpp does); returns
    the float32 weights as stored there (dequantised, still permuted), GGUF names."""
    types = {**TYPES, **(types or {})}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-test-llama")
    w.add_block_count(g.layers)
    w.add_context_length(g.ctx)
    w.add_embedding_length(g.dim)
    w.add_feed_forward_length(g.hidden)
    w.add_head_count(g.heads)
    w.add_head_count_kv(g.kv_heads)
    w.add_rope_freq_base(g.theta)
    w.add_layer_norm_rms_eps(g.eps)
    w.add_rope_dimension_count(g.hd)
    w.add_vocab_size(g.vocab)
    stored = {}
    for name, a in hf_weights(g, seed, tied).items():
        kind = kind_of(name)
        if kind == "attn_q":
            a = permute(a, g.heads)
        elif kind == "attn_k":
            a = permute(a, g.kv_heads)
        qt = types.get(kind, T.F32)
        data = gguf.quants.quantize(a, qt)
        w.add_tensor(name, data, raw_dtype=qt)
        stored[name] = gguf.quants.dequantize(data, qt).astype(F32).reshape(a.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


# ---------------------------------------------------------------- a direct forward

def direct_logits(wts: dict[str, np.ndarray], g: Geo, tokens: list[int]) -> np.ndarray:
    """Float64 forward straight from the GGUF tensors in llama.cpp's convention: attn_q and
    attn_k keep their permuted rows and RoPE rotates adjacent pairs (2i, 2i+1); logits of
    the last token."""
    f = {k: v.astype(np.float64) for k, v in wts.items()}

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return w * x / np.sqrt(np.mean(x * x) + g.eps)

    def rope(v: np.ndarray, pos: int) -> np.ndarray:
        h = v.reshape(-1, g.hd // 2, 2).copy()
        ang = pos * g.theta ** (-2.0 * np.arange(g.hd // 2) / g.hd)
        c, s = np.cos(ang), np.sin(ang)
        a, b = h[..., 0].copy(), h[..., 1].copy()
        h[..., 0], h[..., 1] = a * c - b * s, a * s + b * c
        return h.reshape(-1)

    keys: list[list[np.ndarray]] = [[] for _ in range(g.layers)]
    vals: list[list[np.ndarray]] = [[] for _ in range(g.layers)]
    grp = g.heads // g.kv_heads
    x = np.zeros(g.dim)
    for pos, tok in enumerate(tokens):
        x = f["token_embd.weight"][tok].copy()
        for i in range(g.layers):
            p = f"blk.{i}."
            xb = norm(x, f[p + "attn_norm.weight"])
            q = rope(f[p + "attn_q.weight"] @ xb, pos).reshape(g.heads, g.hd)
            keys[i].append(rope(f[p + "attn_k.weight"] @ xb, pos).reshape(g.kv_heads, g.hd))
            vals[i].append((f[p + "attn_v.weight"] @ xb).reshape(g.kv_heads, g.hd))
            k, v = np.stack(keys[i]), np.stack(vals[i])  # [t, kvh, hd]
            out = []
            for h in range(g.heads):
                sc = k[:, h // grp] @ q[h] / math.sqrt(g.hd)
                a = np.exp(sc - sc.max())
                out.append((a / a.sum()) @ v[:, h // grp])
            x = x + f[p + "attn_output.weight"] @ np.concatenate(out)
            xb = norm(x, f[p + "ffn_norm.weight"])
            gate = f[p + "ffn_gate.weight"] @ xb
            x = x + f[p + "ffn_down.weight"] @ (gate / (1 + np.exp(-gate))
                                                * (f[p + "ffn_up.weight"] @ xb))
    cls = f.get("output.weight", f["token_embd.weight"])
    return cls @ norm(x, f["output_norm.weight"])


# ---------------------------------------------------------------- import

@pytest.fixture
def tiny_gguf(tmp_path: Path) -> tuple[Path, Geo, dict[str, np.ndarray]]:
    g = Geo()
    p = tmp_path / "tiny.gguf"
    return p, g, write_gguf(p, g, seed=1)


def test_import_maps_keys_types_and_copies_blocks(tiny_gguf, tmp_path):
    path, g, _ = tiny_gguf
    r = import_gguf(path, tmp_path / "m.bin")
    cfg = r.config
    assert (cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
            cfg.vocab_size, cfg.max_seq_len) == (64, 128, 2, 4, 2, 96, 64)
    assert cfg.rope_theta == 100000.0 and cfg.norm_eps == float(F32(1e-5))
    assert cfg.tied_embeddings and cfg.weight_type == WEIGHT_PER_TENSOR
    types = dict(zip(block_order(cfg), cfg.tensor_types, strict=True))
    assert types[("tok_embedding", None)] == WEIGHT_Q8_0
    assert types[("wq", 1)] == WEIGHT_Q4_1 and types[("wk", 0)] == WEIGHT_Q8_0
    assert types[("wv", 0)] == WEIGHT_F32 and types[("w_down", 1)] == WEIGHT_F32  # F16, F32
    assert r.model_name == "tiny-test-llama" and "tiny-test-llama (llama, 2 layers" in \
        r.describe()
    assert r.size == (tmp_path / "m.bin").stat().st_size
    # blocks are GGUF's bytes, q/k rows moved back per head, nothing requantised
    ck = load_checkpoint(tmp_path / "m.bin")
    src = {t.name: t for t in gguf.GGUFReader(path).tensors}
    wq = ck.layers["wq"][1]
    assert isinstance(wq, GGMLBlock) and wq.kind == "q4_1"
    assert np.array_equal(wq.raw, unpermute_rows(np.asarray(src["blk.1.attn_q.weight"].data),
                                                 g.heads))
    emb = ck.tok_embedding
    assert isinstance(emb, GGMLBlock)
    assert np.array_equal(emb.raw, np.asarray(src["token_embd.weight"].data))
    assert ck.classifier is emb
    # the optional tokenizer blob travels as opaque bytes after the tensors
    r2 = import_gguf(path, tmp_path / "t.bin", tokenizer=b"\x00vocab\xff")
    assert r2.config.tokenizer_size == 7 and r2.size == -(-r.size // 32) * 32 + 7
    assert load_checkpoint(tmp_path / "t.bin").tokenizer == b"\x00vocab\xff"


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(24 * 3).reshape(24, 3)
    for heads in (1, 2, 3):
        assert np.array_equal(unpermute_rows(permute(w, heads), heads), w)
    # within a head of 4 rows, GGUF row order (0, 2, 1, 3) of the HF rows
    assert unpermute_rows(np.array([0, 2, 1, 3]), 1).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("tied", [True, False])
def test_float_forward_equals_direct_llama_cpp_computation(tmp_path, tied):
    g = Geo()
    wts = write_gguf(tmp_path / "m.gguf", g, seed=2, tied=tied)
    import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")
    ck = load_checkpoint(tmp_path / "m.bin")
    tokens = [3, 17, 42, 5]
    tf = Transformer(ck, 16, arith="float")
    for pos, t in enumerate(tokens):
        got = tf.forward(t, pos)
    want = direct_logits(wts, g, tokens)
    assert got is not None
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    # the integer path is the same model up to int8 activations (~1 % per matvec)
    ti = Transformer(ck, 16, arith="int")
    for pos, t in enumerate(tokens):
        got_i = ti.forward(t, pos)
    assert got_i is not None
    assert np.linalg.norm(got_i - want) <= 0.05 * np.linalg.norm(want)
    r = generate(ck, tokens, 3, arith="int")
    assert r.positions == 7 and len(r.tokens) == 3


# ---------------------------------------------------------------- errors

def test_wrong_architecture_is_one_error(tmp_path):
    write_gguf(tmp_path / "m.gguf", Geo(), arch="gpt2")
    with pytest.raises(GGUFImportError, match="general.architecture is 'gpt2'; only 'llama'"):
        import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")
    assert not (tmp_path / "m.bin").exists()


def test_unsupported_tensor_type_names_the_tensor(tmp_path):
    write_gguf(tmp_path / "m.gguf", Geo(), types={"ffn_up": T.Q5_0})
    with pytest.raises(GGUFImportError, match=r"tensor blk\.0\.ffn_up\.weight has type Q5_0; "
                       "supported: F32, F16, Q8_0, Q4_1"):
        import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_the_kept_reader_follows_the_file(tiny_gguf, tmp_path):
    """open_gguf keeps one reader per file (making one takes seconds on a real
    vocabulary), but a file written again under the same name is read again."""
    path, g, _ = tiny_gguf
    first = open_gguf(path)
    assert open_gguf(path) is first
    write_gguf(path, g, seed=2, tied=False)   # other weights, an output matrix more
    again = open_gguf(path)
    assert again is not first
    assert {t.name for t in again.tensors} - {t.name for t in first.tensors} == {"output.weight"}


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.01])
def test_truncated_file_is_one_error(tiny_gguf, tmp_path, keep):
    path, _, _ = tiny_gguf
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(GGUFImportError, match="truncated") as e:
        import_gguf(path, tmp_path / "m.bin")
    assert "\n" not in str(e.value)  # one line for the CLI's "nexos: error: ..."
    assert not (tmp_path / "m.bin").exists()


def test_missing_file_tensor_and_key(tmp_path):
    with pytest.raises(GGUFImportError, match="no such file"):
        import_gguf(tmp_path / "absent.gguf", tmp_path / "m.bin")
    assert issubclass(GGUFImportError, CheckpointError)
    for with_embedding, message in ((False, "missing tensor token_embd.weight"),
                                    (True, "missing key llama.embedding_length")):
        w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
        if with_embedding:
            w.add_tensor("token_embd.weight", np.zeros((8, 32), F32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with pytest.raises(GGUFImportError, match=message):
            import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")


# ---------------------------------------------------------------- the integer contract

def _parts(bits: int, f16: bool) -> tuple[int, int, int]:
    """(sign, mant, p) of an f16/f32 bit pattern, as docs/checkpoint.md defines them."""
    if f16:
        s, e, f, bias, fb = bits >> 15, (bits >> 10) & 31, bits & 1023, 25, 10
    else:
        s, e, f, bias, fb = bits >> 31, (bits >> 23) & 255, bits & 0x7FFFFF, 150, 23
    mant, p = (f | (1 << fb), e - bias) if e else (f, 1 - bias)
    return (-1 if s else 1), mant, p


def _k(mant: int, p: int) -> int | None:
    return mant.bit_length() - 1 + p if mant else None


def _fix(sign: int, mant: int, p: int, e: int) -> int:
    s = p + e
    if s >= 0:
        return sign * (mant << s)
    n = -s
    return 0 if n > 62 else sign * ((mant + (1 << (n - 1))) >> n)


def _shift(parts: list[tuple[int, int, int]]) -> int:
    ks = [k for _, m, p in parts if (k := _k(m, p)) is not None]
    return 14 - max(ks) if ks else 0


def _f16_bits(raw: bytes, off: int) -> int:
    return struct.unpack_from("<H", raw, off)[0]


def _f32_bits(v: np.float32) -> int:
    return struct.unpack("<I", struct.pack("<f", float(v)))[0]


def _to_f32_rne(n: int) -> np.float32:
    """int -> float32, round to nearest even, with Python integers only."""
    a, neg = abs(n), n < 0
    if a.bit_length() > 24:
        sh = a.bit_length() - 24
        q, r = divmod(a, 1 << sh)
        half = 1 << (sh - 1)
        q += 1 if (r > half or (r == half and q & 1)) else 0
        a = q << sh
    return F32(-a if neg else a)


def scalar_matvec(kind: str, raw: np.ndarray, cols: int, x: np.ndarray) -> np.ndarray:
    """docs/checkpoint.md "Quantized matvec in integers", one value at a time."""
    nb, bsz = cols // 32, {"q8_0": 34, "q4_1": 20}[kind]
    xq, sx, s_parts = [], [], []
    for b in range(nb):
        blk = x[32 * b: 32 * b + 32]
        s = F32(F32(np.abs(blk).max()) / F32(127.0))
        q = [0] * 32 if s == 0 else [
            max(-127, min(127, int(math.copysign(math.floor(abs(float(F32(v / s))) + 0.5),
                                                 float(v))))) for v in blk]
        xq.append(q)
        sx.append(sum(q))
        s_parts.append(_parts(_f32_bits(s), f16=False))
    ex = min(_shift(s_parts), 64)
    X = [_fix(*sp, ex) for sp in s_parts]
    out = []
    for r in range(raw.shape[0]):
        row = bytes(raw[r])
        d = [_parts(_f16_bits(row, b * bsz), True) for b in range(nb)]
        m = [_parts(_f16_bits(row, b * bsz + 2), True) for b in range(nb)] \
            if kind == "q4_1" else []
        ew = _shift(d + m)
        acc = 0
        for b in range(nb):
            o = b * bsz
            if kind == "q8_0":
                q = list(struct.unpack_from("<32b", row, o + 2))
            else:
                qs = row[o + 4: o + 20]
                q = [c & 15 for c in qs] + [c >> 4 for c in qs]
            t = _fix(*d[b], ew) * sum(a * c for a, c in zip(q, xq[b], strict=True))
            if kind == "q4_1":
                t += _fix(*m[b], ew) * sx[b]
            acc += X[b] * t
        assert abs(acc) < 2**62
        T_ = ex + ew
        out.append(_to_f32_rne(acc) * F32(2.0 ** -T_))
    return np.array(out, dtype=F32)


def _edge_weights(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    w = rng.standard_normal((rows, cols)).astype(F32)
    w[0] = 0.0  # an all-zero row
    w[1, :32] = 0.0  # a zero block
    w[2] *= F32(1e-6)  # f16 subnormal scales
    w[3, :32] *= F32(300.0)  # a wide dynamic range within a row
    w[4] = np.abs(w[4]) + F32(5.0)  # Q4_1: a positive min
    return w


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
def test_integer_matvec_is_the_documented_arithmetic(kind):
    rng = np.random.default_rng(7)
    rows, cols = 12, 128
    raw = quantize_blocks(_edge_weights(rng, rows, cols), kind)
    raw[5, :2] = np.frombuffer(np.float16(-0.02).tobytes(), np.uint8)  # a negative scale
    qm = QMatrix.prepare(GGMLBlock(kind, raw, cols))
    xs = [rng.standard_normal(cols).astype(F32) * F32(3.0),
          np.concatenate([np.zeros(32, F32), rng.standard_normal(96).astype(F32)]),
          (rng.standard_normal(cols) * np.exp(4 * rng.standard_normal(cols))).astype(F32),
          np.zeros(cols, F32), rng.standard_normal(cols).astype(F32) * F32(1e-30)]
    for x in xs:
        got, want = qm.matvec(x), scalar_matvec(kind, raw, cols, x)
        assert got.dtype == F32
        assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert np.abs(qm.D).max() <= 2**15 - 16
    if qm.M is not None:
        assert np.abs(qm.M).max() <= 2**15 - 16


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
def test_dequantisation_is_gguf_and_the_documented_formula(kind):
    rng = np.random.default_rng(3)
    raw = quantize_blocks(rng.standard_normal((4, 64)).astype(F32), kind)
    blk = GGMLBlock(kind, raw, 64)
    w = blk.dequantize()
    b = raw.reshape(4, 2, -1)
    d = b[..., :2].copy().view(np.float16).astype(F32)
    if kind == "q8_0":
        want = d * b[..., 2:].view(np.int8).astype(F32)
    else:
        m = b[..., 2:4].copy().view(np.float16).astype(F32)
        nib = b[..., 4:]
        q = np.concatenate([nib & 15, nib >> 4], axis=-1).astype(F32)
        want = d * q + m
    assert np.array_equal(w, want.reshape(4, 64))
    assert np.array_equal(blk.row(2), w[2]) and np.array_equal(as_float(blk), w)


# ---------------------------------------------------------------- the real SmolLM2 GGUF

def gguf_tokenizer(path: Path):
    """A ``tokenizers`` tokenizer from the GGUF's own vocabulary and merges: GPT-2 byte-level
    BPE with the ``smollm`` pre-tokenizer (digits split one by one, then the GPT-2 regex)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(path)
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"
    vocab = {t: i for i, t in enumerate(r.fields["tokenizer.ggml.tokens"].contents())}
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.fixture(scope="module")
def real_ckpt(tmp_path_factory: pytest.TempPathFactory):
    """The real GGUF imported without its tokenizer, and `tokenizers`' view of its
    vocabulary: made once per session for every worker."""
    assert SMOLLM2_GGUF is not None

    def make():
        out = shared_dir(tmp_path_factory) / "smollm2-no-tokenizer.bin"
        return import_gguf(SMOLLM2_GGUF, out), out, gguf_tokenizer(SMOLLM2_GGUF)
    r, out, tok = shared_once(tmp_path_factory, "smollm2-no-tokenizer", make)
    return r, load_checkpoint(out), tok


@needs_smollm2
def test_real_gguf_geometry(real_ckpt):
    r, ck, _ = real_ckpt
    c = ck.config
    assert (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
            c.vocab_size) == (576, 1536, 30, 9, 3, 64, 49152)
    assert c.tied_embeddings and c.rope_theta == 100000.0 and c.norm_eps == float(F32(1e-5))
    assert c.tensor_types == (WEIGHT_Q8_0,) + (WEIGHT_Q4_1,) * 210
    assert c.weight_counts == {"q8_0": 1, "q4_1": 210}
    assert c.weight_name == "q8_0+q4_1" and r.tensor_types == {"Q8_0": 1, "F32": 61,
                                                              "Q4_1": 210}
    assert r.size == 96577888 == Path(r.path).stat().st_size


@needs_smollm2
@pytest.mark.parametrize("arith", ["float", "int"])
def test_real_gguf_says_paris(real_ckpt, arith):
    _, ck, tok = real_ckpt
    prompt = tok.encode("The capital of France is").ids
    assert tok.decode(prompt) == "The capital of France is"
    r = generate(ck, prompt, 1, seq_len=16, arith=arith)
    assert tok.decode(r.tokens) == " Paris"


@needs_smollm2
def test_real_gguf_integer_matvec_accuracy(real_ckpt):
    """On real weights and an activation-like input the integer matvec stays within ~1-3 %
    of the float64 product of the dequantised weights (docs/checkpoint.md "Accuracy")."""
    _, ck, _ = real_ckpt
    rng = np.random.default_rng(0)
    for blk in (ck.layers["w_up"][5], ck.layers["wo"][10], ck.tok_embedding):
        assert isinstance(blk, GGMLBlock)
        x = (rng.standard_normal(blk.cols) * (1 + 3 * (rng.random(blk.cols) < 0.01))
             ).astype(F32)
        want = as_float(blk).astype(np.float64) @ x
        got = QMatrix.prepare(blk).matvec(x)
        assert np.linalg.norm(got - want) <= 0.02 * np.linalg.norm(want)


def test_non_finite_block_scale_is_refused(tmp_path):
    g = Geo()
    write_gguf(tmp_path / "m.gguf", g)
    r = gguf.GGUFReader(tmp_path / "m.gguf")
    off = next(t for t in r.tensors if t.name == "blk.1.ffn_gate.weight").data_offset
    data = bytearray((tmp_path / "m.gguf").read_bytes())
    data[off + 20 * 3: off + 20 * 3 + 2] = np.float16(np.inf).tobytes()  # block 3's d
    (tmp_path / "m.gguf").write_bytes(bytes(data))
    with pytest.raises(GGUFImportError, match=r"blk\.1\.ffn_gate\.weight has an infinite "
                       "or NaN block scale"):
        import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")
    assert not (tmp_path / "m.bin").exists()


def test_not_a_gguf_file(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"PK\3\4 this is a zip, not a model" * 4)
    with pytest.raises(GGUFImportError, match="not a GGUF file"):
        import_gguf(tmp_path / "m.gguf", tmp_path / "m.bin")


# ---------------------------------------------------------------- nexos model import --gguf

def test_cli_import_gguf_names_the_model_and_refuses_mixed_flags(tiny_gguf, tmp_path):
    from click.testing import CliRunner

    from nexos.cli import cli

    path, _, _ = tiny_gguf
    r = CliRunner().invoke(cli, ["model", "import", "--gguf", str(path), "--out",
                                 str(tmp_path / "m.bin")])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stdout.split())
    assert "imported tiny-test-llama (llama, 2 layers" in said and "no tokenizer" in said
    assert load_checkpoint(tmp_path / "m.bin").config.n_layers == 2
    for args in (["--gguf", str(path), "--config", "c.json"], ["--weights", "w"]):
        r = CliRunner().invoke(cli, ["model", "import", *args, "--out", str(tmp_path / "x")])
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.exit_code != 0 and len(lines) == 1, r.output
        assert lines[0].startswith("nexos: error: ") and "--gguf" in lines[0], lines


@needs_smollm2
def test_cli_import_real_gguf_embeds_the_tokenizer(tmp_path):
    from click.testing import CliRunner

    from nexos.cli import cli

    assert SMOLLM2_GGUF is not None
    r = CliRunner().invoke(cli, ["model", "import", "--gguf", str(SMOLLM2_GGUF), "--out",
                                 str(tmp_path / "m.bin"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    ck = load_checkpoint(tmp_path / "m.bin")
    assert d["tokenizer_size"] == ck.config.tokenizer_size > 0 and ck.tokenizer is not None
    assert d["size"] == (tmp_path / "m.bin").stat().st_size
