"""Hugging Face import (nexos.model.hf_import) against an independent numpy forward."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors import TensorSpec, safe_open, serialize_file
from safetensors.numpy import save_file

from nexos.cli import cli
from nexos.model.format import LAYER_BLOCKS, load_checkpoint
from nexos.model.hf_import import HF_NAMES, HFImportError, import_hf
from nexos.model.reference import generate
from support import HF_CONFIG, hf_weights


def to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns (truncation) as uint16."""
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def save_bf16(tensors, path):
    """Write BF16 tensors with the safetensors package. safetensors.numpy.save_file cannot
    (numpy has no bfloat16), so the bf16 bits are made here as uint16 and handed to the
    package's own serializer labelled "bfloat16"."""
    bits = {k: to_bf16_bits(v) for k, v in tensors.items()}  # alive until written
    specs = {k: TensorSpec(dtype="bfloat16", shape=list(b.shape), data_ptr=b.ctypes.data,
                           data_len=b.nbytes) for k, b in bits.items()}
    serialize_file(specs, str(path))


def save(tensors, path, dtype):
    """One safetensors file of float32 ``tensors`` stored as ``dtype``."""
    if dtype == "BF16":
        save_bf16(tensors, path)
    else:
        save_file({k: v.astype(np.float16 if dtype == "F16" else np.float32)
                   for k, v in tensors.items()}, str(path))


def save_sharded(folder, tensors, dtype, n_shards=3):
    """Shards named and indexed as Hugging Face writes them; returns the index path."""
    names = sorted(tensors)
    weight_map = {}
    for k in range(n_shards):
        shard = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::n_shards]}
        save(part, folder / shard, dtype)
        weight_map.update(dict.fromkeys(part, shard))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index


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


def write_hf(tmp_path, dtype, tied=True, cfg_changes=None, shards=0):
    """config.json plus one model.safetensors (``shards`` = 0) or that many shards and an
    index; returns (config path, weights path, stored values, config)."""
    t = hf_weights(11, tied)
    cfg = dict(HF_CONFIG, tie_word_embeddings=tied, **(cfg_changes or {}))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if shards:
        st = save_sharded(tmp_path, t, dtype, shards)
    else:
        st = tmp_path / "model.safetensors"
        save(t, st, dtype)
    return tmp_path / "config.json", st, stored_values(t, dtype), cfg


def assert_same_tensors(path, values, tied):
    """Every tensor of the float32 checkpoint at ``path`` equals its source exactly."""
    ck = load_checkpoint(path)
    for i in range(2):
        p = f"model.layers.{i}."
        assert np.array_equal(ck.rms_att[i], values[p + "input_layernorm.weight"])
        assert np.array_equal(ck.rms_ffn[i], values[p + "post_attention_layernorm.weight"])
        for sec, name in HF_NAMES.items():
            if sec in LAYER_BLOCKS:
                assert np.array_equal(ck.layers[sec][i], values[name.format(i=i)]), sec
    assert np.array_equal(ck.rms_final, values["model.norm.weight"])
    assert np.array_equal(ck.tok_embedding, values["model.embed_tokens.weight"])
    head = values["model.embed_tokens.weight" if tied else "lm_head.weight"]
    assert np.array_equal(ck.classifier, head)


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("shards", [0, 2, 3])
def test_import_copies_every_tensor(tmp_path, dtype, tied, shards):
    cfgp, st, values, _ = write_hf(tmp_path, dtype, tied, shards=shards)
    if shards == 3:
        assert len(json.loads(st.read_text())["weight_map"]) == len(values)
    r = import_hf(cfgp, st, tmp_path / "m.bin", weight_type="f32")
    assert r.config.tied_embeddings == tied
    assert_same_tensors(r.path, values, tied)


@pytest.mark.parametrize("shards", [0, 2])
def test_weights_may_be_the_folder(tmp_path, shards):
    cfgp, _, values, _ = write_hf(tmp_path, "BF16", shards=shards)
    r = import_hf(cfgp, tmp_path, tmp_path / "m.bin", weight_type="f32")
    assert_same_tensors(r.path, values, True)


def test_shards_may_differ_in_dtype(tmp_path):
    cfgp, index, _, _ = write_hf(tmp_path, "F32", shards=3)
    t = hf_weights(11, True)
    wmap = json.loads(index.read_text())["weight_map"]
    dtype_of = dict(zip(sorted(set(wmap.values())), ["BF16", "F16", "F32"], strict=True))
    for shard, dtype in dtype_of.items():
        save({n: v for n, v in t.items() if wmap[n] == shard}, tmp_path / shard, dtype)
    values = {n: stored_values({n: v}, dtype_of[wmap[n]])[n] for n, v in t.items()}
    r = import_hf(cfgp, index, tmp_path / "m.bin", weight_type="f32")
    assert_same_tensors(r.path, values, True)


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


def assert_no_output(tmp_path):
    assert not (tmp_path / "x.bin").exists()
    assert not list(tmp_path.glob("*.partial"))


def import_error(cfgp, weights, tmp_path):
    """The message of the HFImportError that importing ``weights`` raises."""
    with pytest.raises(HFImportError) as e:
        import_hf(cfgp, weights, tmp_path / "x.bin")
    assert_no_output(tmp_path)
    return str(e.value)


def test_import_errors(tmp_path):
    cfgp, st, values, cfg = write_hf(tmp_path, "F32")
    cfgp.write_text(json.dumps({k: v for k, v in cfg.items() if k != "vocab_size"}))
    assert import_error(cfgp, st, tmp_path) == f"{cfgp}: missing key vocab_size"
    cfgp.write_text(json.dumps(cfg))
    save_file({k: v for k, v in values.items() if k != "model.layers.1.mlp.up_proj.weight"},
              str(st))
    assert import_error(cfgp, st, tmp_path) == (f"{st}: missing tensor "
                                                "model.layers.1.mlp.up_proj.weight")
    save_file(dict(values, **{"model.norm.weight": np.ones(65, np.float32)}), str(st))
    assert import_error(cfgp, st, tmp_path) == (f"{st}: model.norm.weight: shape (65,), "
                                                "expected (64,)")
    save_file(dict(values, **{"model.norm.weight": np.ones(64, np.int32)}), str(st))
    assert import_error(cfgp, st, tmp_path) == (f"{st}: model.norm.weight: unsupported "
                                                "dtype I32 (F32, F16 or BF16)")


def test_shape_error_names_the_shard(tmp_path):
    cfgp, index, values, _ = write_hf(tmp_path, "BF16", shards=2)
    shard = tmp_path / json.loads(index.read_text())["weight_map"]["model.norm.weight"]
    with safe_open(str(shard), framework="numpy") as f:
        part = {n: values[n] for n in f.keys()}
    save(dict(part, **{"model.norm.weight": np.ones(65, np.float32)}), shard, "BF16")
    assert import_error(cfgp, index, tmp_path) == (f"{shard}: model.norm.weight: shape "
                                                   "(65,), expected (64,)")


def test_missing_shard(tmp_path):
    cfgp, index, _, _ = write_hf(tmp_path, "F32", shards=3)
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(HFImportError, match=r"model\.safetensors\.index\.json: shard "
                       r"model-00002-of-00003\.safetensors \(of tensor .+\) does not exist"):
        import_hf(cfgp, index, tmp_path / "x.bin")
    assert_no_output(tmp_path)


def test_tensor_missing_from_its_shard(tmp_path):
    cfgp, index, values, _ = write_hf(tmp_path, "BF16", shards=2)
    wmap = json.loads(index.read_text())["weight_map"]
    shard = tmp_path / "model-00001-of-00002.safetensors"
    kept = sorted(n for n in values if wmap[n] == shard.name)
    save({n: values[n] for n in kept[1:]}, shard, "BF16")
    with pytest.raises(HFImportError) as e:
        import_hf(cfgp, index, tmp_path / "x.bin")
    assert str(e.value) == (f"{shard}: missing tensor {kept[0]}, which "
                            "model.safetensors.index.json places in this shard")
    assert_no_output(tmp_path)


def test_tensor_missing_from_the_index(tmp_path):
    cfgp, index, _, _ = write_hf(tmp_path, "F16", shards=2)
    doc = json.loads(index.read_text())
    del doc["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    index.write_text(json.dumps(doc))
    with pytest.raises(HFImportError, match=r"index\.json: missing tensor "
                                            r"model\.layers\.1\.mlp\.up_proj\.weight$"):
        import_hf(cfgp, index, tmp_path / "x.bin")
    assert_no_output(tmp_path)


@pytest.mark.parametrize("text, why", [
    ('{"weight_map": {', "not JSON"),
    ('["model-00001-of-00002.safetensors"]', "no weight_map object"),
    ('{"metadata": {}}', "no weight_map object"),
    ('{"weight_map": ["a.safetensors"]}', "no weight_map object"),
    ('{"weight_map": {"model.norm.weight": 3}}', "is not a file name in the same folder"),
    ('{"weight_map": {"model.norm.weight": "../m.safetensors"}}', "../m.safetensors"),
    ('{"weight_map": {"model.norm.weight": "sub/m.safetensors"}}', "sub/m.safetensors"),
])
def test_bad_index(tmp_path, text, why):
    cfgp, index, _, _ = write_hf(tmp_path, "F32", shards=2)
    index.write_text(text)
    with pytest.raises(HFImportError) as e:
        import_hf(cfgp, index, tmp_path / "x.bin")
    msg = str(e.value)
    assert msg.startswith(f"{index}: bad safetensors index (") and why in msg, msg
    assert_no_output(tmp_path)


def test_bad_weights_paths(tmp_path):
    cfgp, _, _, _ = write_hf(tmp_path, "F32")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HFImportError, match="empty: folder has neither model.safetensors "
                                            "nor model.safetensors.index.json"):
        import_hf(cfgp, tmp_path / "empty", tmp_path / "x.bin")
    with pytest.raises(HFImportError, match="nope.safetensors: no such file or folder"):
        import_hf(cfgp, tmp_path / "nope.safetensors", tmp_path / "x.bin")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes((tmp_path / "model.safetensors").read_bytes()[:-4])  # truncated
    with pytest.raises(HFImportError, match="junk.safetensors: not a valid safetensors file"):
        import_hf(cfgp, junk, tmp_path / "x.bin")
    assert_no_output(tmp_path)


def test_cli_import_sharded_folder_and_one_line_error(tmp_path):
    cfgp, _, values, _ = write_hf(tmp_path, "BF16", shards=3)
    r = CliRunner().invoke(cli, ["model", "import", "--config", str(cfgp), "--weights",
                                 str(tmp_path), "--weight-type", "f32", "--out",
                                 str(tmp_path / "m.bin"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["n_layers"] == 2
    assert_same_tensors(tmp_path / "m.bin", values, True)
    (tmp_path / "model-00003-of-00003.safetensors").unlink()
    r = CliRunner().invoke(cli, ["model", "import", "--config", str(cfgp), "--weights",
                                 str(tmp_path), "--out", str(tmp_path / "x.bin")])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert len(lines) == 1 and lines[0].startswith("nexos: error: "), lines
    assert "model-00003-of-00003.safetensors" in lines[0] and "does not exist" in lines[0]
    assert_no_output(tmp_path)
