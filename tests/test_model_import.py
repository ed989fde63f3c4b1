"""Hugging Face import (nexos.model.hf_import) against an independent numpy forward."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from nexos.model.hf_import import HFImportError, import_hf
from nexos.model.reference import generate

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 128, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
}


def hf_weights(seed, tied):
    """Random float32 weights under the real Hugging Face names."""
    rng = np.random.default_rng(seed)
    n = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": (rng.standard_normal((256, 64)) * 0.05)
         .astype(np.float32),
         "model.norm.weight": rng.uniform(0.5, 1.5, 64).astype(np.float32)}
    for i in range(2):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, 64).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, 64).astype(np.float32)
        t[p + "self_attn.q_proj.weight"] = 3 * n(64, 64)
        t[p + "self_attn.k_proj.weight"] = 3 * n(32, 64)
        t[p + "self_attn.v_proj.weight"] = n(32, 64)
        t[p + "self_attn.o_proj.weight"] = n(64, 64)
        t[p + "mlp.gate_proj.weight"] = n(128, 64)
        t[p + "mlp.up_proj.weight"] = n(128, 64)
        t[p + "mlp.down_proj.weight"] = n(64, 128)
    if not tied:
        t["lm_head.weight"] = (rng.standard_normal((256, 64)) * 0.05).astype(np.float32)
    return t


def to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns (truncation) as uint16."""
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def write_safetensors_by_hand(path, tensors, dtype):
    """Minimal safetensors writer (header length, JSON, data), used for BF16."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = to_bf16_bits(a).tobytes() if dtype == "BF16" else a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def stored_values(tensors, dtype):
    """What the file holds, widened back to float32."""
    if dtype == "F16":
        return {k: v.astype(np.float16).astype(np.float32) for k, v in tensors.items()}
    if dtype == "BF16":
        return {k: (to_bf16_bits(v).astype(np.uint32) << 16).view(np.float32)
                for k, v in tensors.items()}
    return tensors


def direct_forward(t, tokens, gen_len, cfg):
    """Independent greedy Llama forward (float64) straight on the HF tensors."""
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, L = d // nh, cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    W = {k: v.astype(np.float64) for k, v in t.items()}
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2) / hd)

    def norm(x, w):
        return w * x / np.sqrt(np.mean(x * x) + eps)

    def rope(v, pos):
        v = v.reshape(-1, hd)
        a, b = v[:, : hd // 2], v[:, hd // 2:]
        c, s = np.cos(pos * inv), np.sin(pos * inv)
        return np.concatenate([a * c - b * s, b * c + a * s], 1)

    ks = [[] for _ in range(L)]
    vs = [[] for _ in range(L)]
    seq, out, logits = list(tokens), [], None
    for pos in range(len(tokens) + gen_len):  # every token is fed, the last one too
        x = W["model.embed_tokens.weight"][seq[pos]].copy()
        for i in range(L):
            p = f"model.layers.{i}."
            h = norm(x, W[p + "input_layernorm.weight"])
            q = rope(W[p + "self_attn.q_proj.weight"] @ h, pos)
            ks[i].append(rope(W[p + "self_attn.k_proj.weight"] @ h, pos))
            vs[i].append((W[p + "self_attn.v_proj.weight"] @ h).reshape(-1, hd))
            K, V = np.stack(ks[i]), np.stack(vs[i])  # [T, nkv, hd]
            att = []
            for hh in range(nh):
                sc = K[:, hh // (nh // nkv)] @ q[hh] / np.sqrt(hd)
                p_ = np.exp(sc - sc.max())
                att.append((p_ / p_.sum()) @ V[:, hh // (nh // nkv)])
            x = x + W[p + "self_attn.o_proj.weight"] @ np.concatenate(att)
            h = norm(x, W[p + "post_attention_layernorm.weight"])
            g = W[p + "mlp.gate_proj.weight"] @ h
            x = x + W[p + "mlp.down_proj.weight"] @ (g / (1 + np.exp(-g)) *
                                                     (W[p + "mlp.up_proj.weight"] @ h))
        logits = head @ norm(x, W["model.norm.weight"])
        if len(tokens) - 1 <= pos < len(tokens) + gen_len - 1:
            out.append(int(np.argmax(logits)))
            seq.append(out[-1])
    return out, logits


def write_hf(tmp_path, dtype, tied=True, cfg_changes=None):
    t = hf_weights(11, tied)
    cfg = dict(HF_CONFIG, tie_word_embeddings=tied, **(cfg_changes or {}))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    st = tmp_path / "model.safetensors"
    if dtype == "BF16":
        write_safetensors_by_hand(st, t, dtype)
    else:
        save_file({k: v.astype(np.float16 if dtype == "F16" else np.float32)
                   for k, v in t.items()}, str(st))
    return tmp_path / "config.json", st, stored_values(t, dtype), cfg


@pytest.mark.parametrize("dtype, tied", [("F32", True), ("F16", True), ("BF16", True),
                                         ("F32", False)])
def test_import_matches_direct_forward(tmp_path, dtype, tied):
    cfgp, st, values, cfg = write_hf(tmp_path, dtype, tied)
    r = import_hf(cfgp, st, tmp_path / "m.bin", weight_type="f32")
    assert r.config.tied_embeddings == tied and r.config.n_kv_heads == 2
    prompt = [5, 17, 200]
    g = generate(r.path, prompt, 12, seq_len=64)
    tokens, logits = direct_forward(values, prompt, 12, cfg)
    assert g.tokens == tokens
    assert np.allclose(g.final_logits, logits, atol=2e-4, rtol=1e-4)


def test_int8_import_stays_close(tmp_path):
    cfgp, st, values, cfg = write_hf(tmp_path, "F32")
    r = import_hf(cfgp, st, tmp_path / "m8.bin", weight_type="int8")
    g = generate(r.path, [5, 17, 200], 1, seq_len=64)
    _, logits = direct_forward(values, [5, 17, 200], 1, cfg)
    assert np.corrcoef(g.final_logits, logits)[0, 1] > 0.99


def test_import_errors(tmp_path):
    cfgp, st, values, cfg = write_hf(tmp_path, "F32")
    with pytest.raises(HFImportError, match="missing key vocab_size"):
        c = dict(cfg)
        del c["vocab_size"]
        cfgp.write_text(json.dumps(c))
        import_hf(cfgp, st, tmp_path / "x.bin")
    cfgp.write_text(json.dumps(cfg))
    bad = dict(values)
    del bad["model.layers.1.mlp.up_proj.weight"]
    save_file(bad, str(st))
    with pytest.raises(HFImportError, match="missing tensor model.layers.1.mlp.up_proj"):
        import_hf(cfgp, st, tmp_path / "x.bin")
    bad = dict(values, **{"model.norm.weight": np.ones(65, np.float32)})
    save_file(bad, str(st))
    with pytest.raises(HFImportError, match="model.norm.weight: shape"):
        import_hf(cfgp, st, tmp_path / "x.bin")
    bad = dict(values, **{"model.norm.weight": np.ones(64, np.int32)})
    save_file(bad, str(st))
    with pytest.raises(HFImportError, match="unsupported dtype I32"):
        import_hf(cfgp, st, tmp_path / "x.bin")
    assert not (tmp_path / "x.bin").exists()
    assert not list(tmp_path.glob("*.partial"))
