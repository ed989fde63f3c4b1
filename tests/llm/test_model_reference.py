"""Reference generation rules, tied/untied classifier and the CLI (nexos.model)."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from nexos.model.cli import model
from nexos.model.format import as_float, load_checkpoint, write_checkpoint
from nexos.model.reference import RequestError, Transformer, generate
from nexos.model.synth import synthesize


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "tiny.bin"
    synthesize(p, "tiny", seed=4)
    return p


def test_generation_definition(tiny):
    a = generate(tiny, [1, 2, 3], 8)
    b = generate(tiny, [1, 2, 3], 9)
    assert len(a.tokens) == 8 and a.positions == 3 + 8  # every token is fed
    assert b.tokens[:8] == a.tokens  # greedy: a prefix of a longer run
    # the final logits come from feeding the last generated token: they pick b's 9th token
    assert int(np.argmax(a.final_logits)) == b.tokens[8]
    c = generate(tiny, [1, 2, 3] + b.tokens[:7], 1)  # feeding the prefix back
    assert c.tokens == [b.tokens[7]]
    assert np.array_equal(c.final_logits, a.final_logits) and c.digest == a.digest


def test_temperature_sampling_is_seeded(tiny):
    a = generate(tiny, [7], 20, temperature=1.0, seed=5)
    b = generate(tiny, [7], 20, temperature=1.0, seed=5)
    c = generate(tiny, [7], 20, temperature=1.0, seed=6)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_untied_classifier_is_used(tmp_path, tiny):
    ck = load_checkpoint(tiny)
    cfg = dataclasses.replace(ck.config, weight_type=0, tied_embeddings=False)
    t = {name: [as_float(b) for b in blocks] for name, blocks in ck.layers.items()}
    emb = as_float(ck.tok_embedding)
    t.update(rms_att=ck.rms_att, rms_ffn=ck.rms_ffn, rms_final=ck.rms_final,
             tok_embedding=emb, classifier=emb)
    write_checkpoint(tmp_path / "same.bin", cfg, t)
    write_checkpoint(tmp_path / "tied.bin", dataclasses.replace(cfg, tied_embeddings=True), t)
    same = generate(tmp_path / "same.bin", [1, 2], 6)
    tied = generate(tmp_path / "tied.bin", [1, 2], 6)
    assert same.tokens == tied.tokens and np.array_equal(same.final_logits, tied.final_logits)
    t["classifier"] = emb[::-1].copy()  # reversed rows: logits come out reversed
    write_checkpoint(tmp_path / "rev.bin", cfg, t)
    rev = Transformer(load_checkpoint(tmp_path / "rev.bin"), 4).forward(1, 0)
    first = Transformer(load_checkpoint(tmp_path / "tied.bin"), 4).forward(1, 0)
    assert np.allclose(rev, first[::-1], atol=1e-5)


@pytest.mark.parametrize("prompt, gen, seq, msg", [
    ([], 3, 16, "at least one token"), ([256], 3, 16, "outside the vocabulary"),
    ([1, 2], 15, 16, "exceeds seq_len"), ([1], 1, 129, "max_seq_len"), ([1], 0, 16, "gen_len"),
])
def test_bad_requests(tiny, prompt, gen, seq, msg):
    with pytest.raises(RequestError, match=msg):
        generate(tiny, prompt, gen, seq_len=seq)


def test_cli_synth_ref_and_errors(tmp_path, tiny):
    run = CliRunner().invoke
    out = tmp_path / "c.bin"
    r = run(model, ["synth", "--preset", "tiny", "--seed", "4", "--out", str(out), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["size"] == out.stat().st_size
    assert out.read_bytes() == tiny.read_bytes()
    r = run(model, ["ref", str(out), "--prompt-tokens", "1,2,3", "--gen-len", "5", "--json"])
    assert r.exit_code == 0
    assert json.loads(r.output)["tokens"] == generate(tiny, [1, 2, 3], 5).tokens
    for args in (["ref", str(tmp_path / "none.bin"), "--prompt-tokens", "1"],
                 ["ref", str(out), "--prompt-tokens", "1,a"],
                 ["ref", str(out), "--prompt-tokens", "1,999"],
                 ["ref", str(out), "--prompt-tokens", "1", "--gen-len", "200"],
                 ["import", "--config", str(tmp_path / "no.json"), "--weights", "w",
                  "--out", str(tmp_path / "o.bin")]):
        r = run(model, args)
        assert r.exit_code == 1, args
        assert r.output.startswith("Error: ") and r.output.count("\n") == 1, r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)


# Scalar float32 versions of the model library's C loops (user/llm/llm.c), one rounding per
# operation, to pin the reference's summation order (docs/checkpoint.md "Float arithmetic,
# exactly"). BLAS, dot or einsum would sum in another order and fail these.

def _c_matvec_f32(w, x):
    out = []
    for row in w:
        a = [np.float32(0.0)] * 4
        n4 = len(x) // 4 * 4
        for i in range(0, n4, 4):
            for j in range(4):
                a[j] = np.float32(a[j] + np.float32(row[i + j] * x[i + j]))
        for i in range(n4, len(x)):
            a[0] = np.float32(a[0] + np.float32(row[i] * x[i]))
        out.append(np.float32(np.float32(a[0] + a[1]) + np.float32(a[2] + a[3])))
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("cols", [64, 10, 3])
def test_matvec_f32_is_the_c_loop(cols):
    from nexos.model.reference import matvec_f32
    rng = np.random.default_rng(cols)
    w = rng.standard_normal((9, cols)).astype(np.float32)
    x = (rng.standard_normal(cols) * 100).astype(np.float32)
    assert np.array_equal(matvec_f32(w, x), _c_matvec_f32(w, x))


def test_rmsnorm_and_attention_are_the_c_loops(tiny):
    import math

    from nexos.model.reference import rmsnorm
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(64) * 30).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    ss = np.float32(0.0)
    for v in x:
        ss = np.float32(ss + np.float32(v * v))
    ss = np.float32(np.float32(ss / np.float32(64)) + np.float32(1e-5))
    inv = np.float32(np.float32(1.0) / np.sqrt(ss))
    want = np.array([np.float32(a * np.float32(b * inv)) for a, b in zip(w, x)])
    assert np.array_equal(rmsnorm(x, w, 1e-5), want)

    tf = Transformer(load_checkpoint(tiny), 16)
    cfg, pos = tf.cfg, 9
    tf.key_cache[1] = rng.standard_normal(tf.key_cache[1].shape).astype(np.float32)
    tf.value_cache[1] = rng.standard_normal(tf.value_cache[1].shape).astype(np.float32)
    q = (rng.standard_normal(cfg.dim) * 3).astype(np.float32)
    hd, grp = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    scale = np.sqrt(np.float32(hd))
    out = []
    for h in range(cfg.n_heads):
        kvo = (h // grp) * hd
        att = []
        for t in range(pos + 1):
            dot = np.float32(0.0)
            for i in range(hd):
                dot = np.float32(dot + np.float32(q[h * hd + i] * tf.key_cache[1, t, kvo + i]))
            att.append(np.float32(dot / scale))
        m = max(att)
        e = [np.float32(math.exp(float(np.float32(a - m)))) for a in att]
        total = np.float32(0.0)
        for v in e:
            total = np.float32(total + v)
        o = [np.float32(0.0)] * hd
        for t in range(pos + 1):
            a = np.float32(e[t] / total)
            for i in range(hd):
                o[i] = np.float32(o[i] + np.float32(a * tf.value_cache[1, t, kvo + i]))
        out += o
    assert np.array_equal(tf.attention(1, q, pos), np.array(out, dtype=np.float32))
