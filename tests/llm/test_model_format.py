"""Checkpoint header, size and loader checks (nexos.model.format)."""

import dataclasses
import struct

import numpy as np
import pytest

from nexos.model.format import (
    HEADER_SIZE,
    WEIGHT_F32,
    WEIGHT_INT8,
    WEIGHT_PER_TENSOR,
    WEIGHT_Q4_1,
    WEIGHT_Q8_0,
    CheckpointError,
    CheckpointWriter,
    ModelConfig,
    QuantBlock,
    as_float,
    block_order,
    checkpoint_size,
    layout,
    load_checkpoint,
    pack_header,
    read_header,
    tokenizer_offset,
    unpack_header,
    write_checkpoint,
)
from nexos.model.qblocks import GGMLBlock, quantize_blocks
from nexos.model.synth import PRESETS, synthesize

TINY = PRESETS["tiny"]


def test_header_round_trip_and_layout_bytes():
    cfg = dataclasses.replace(PRESETS["smollm-135m"], rope_theta=50000.0, norm_eps=1e-6)
    raw = pack_header(cfg)
    assert len(raw) == HEADER_SIZE and raw[:8] == b"NEXOSLM\0"
    assert raw[60:] == bytes(HEADER_SIZE - 60)
    assert struct.unpack_from("<11I", raw, 8) == (1, 576, 1536, 30, 9, 3, 49152, 2048, 1, 64, 1)
    back = unpack_header(raw)
    assert back == cfg
    assert (back.head_dim, back.kv_dim) == (64, 192)
    assert back.rope_theta == 50000.0 and back.norm_eps == float(np.float32(1e-6))


def test_smollm_size_matches_independent_formula():
    cfg = PRESETS["smollm-135m"]
    d, h, L, v, kv = 576, 1536, 30, 49152, 192
    values = v * d + L * (d * d + 2 * kv * d + d * d + 3 * h * d)
    norms = 4 * (2 * L * d + d)
    assert checkpoint_size(cfg) == 256 + norms + values + 4 * values // 64
    f32 = dataclasses.replace(cfg, weight_type=0, tied_embeddings=False)
    assert checkpoint_size(f32) == 256 + norms + 4 * (values + v * d)


@pytest.fixture
def tiny_file(tmp_path):
    p = tmp_path / "tiny.bin"
    synthesize(p, "tiny", seed=3)
    return p


def test_loader_reads_what_was_written(tmp_path):
    rng = np.random.default_rng(0)
    cfg = dataclasses.replace(TINY, weight_type=0, tied_embeddings=False)
    shapes = {"wq": (64, 64), "wk": (32, 64), "wv": (32, 64), "wo": (64, 64),
              "w_gate": (128, 64), "w_down": (64, 128), "w_up": (128, 64)}
    t = {k: rng.standard_normal((2,) + s).astype(np.float32) for k, s in shapes.items()}
    t.update(rms_att=rng.random((2, 64)), rms_ffn=rng.random((2, 64)), rms_final=rng.random(64),
             tok_embedding=rng.random((256, 64)), classifier=rng.random((256, 64)))
    p = tmp_path / "f32.bin"
    write_checkpoint(p, cfg, t)
    ck = load_checkpoint(p)
    assert ck.config == cfg
    assert np.array_equal(ck.layers["w_down"][1], t["w_down"][1])
    assert np.array_equal(ck.classifier, t["classifier"].astype(np.float32))
    assert np.array_equal(ck.rms_ffn, t["rms_ffn"].astype(np.float32))
    # the same tensors as int8: blocks come back as (q, s) within half a step
    p8 = tmp_path / "i8.bin"
    write_checkpoint(p8, dataclasses.replace(cfg, weight_type=1, group_size=64), t)
    blk = load_checkpoint(p8).layers["wq"][0]
    assert isinstance(blk, QuantBlock) and blk.s.shape == (64, 1)
    step = np.repeat(blk.s, 64, axis=1)
    assert np.all(np.abs(blk.dequantize() - t["wq"][0]) <= step / 2 * (1 + 1e-5))


def test_missing_section_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="missing tensor rms_att"):
        write_checkpoint(tmp_path / "x.bin", TINY, {})
    assert not list(tmp_path.iterdir())  # no partial file left behind


@pytest.mark.parametrize("change, message", [
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\0", "extra bytes"),
    (lambda b: b"NEXOSLX\0" + b[8:], "bad magic"),
    (lambda b: b[:8] + struct.pack("<I", 3) + b[12:], "version 3"),
    (lambda b: b[:24] + struct.pack("<I", 5) + b[28:], "not a multiple of n_heads"),
    (lambda b: b[:40] + struct.pack("<I", 7) + b[44:], "unknown weight_type"),
    (lambda b: b[:44] + struct.pack("<I", 48) + b[48:], "group_size 48"),
    (lambda b: b[:100], "truncated header"),
])
def test_reader_rejects_bad_files(tiny_file, change, message):
    tiny_file.write_bytes(change(tiny_file.read_bytes()))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tiny_file)


def test_odd_head_dim_and_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="odd"):
        ModelConfig(dim=60, hidden_dim=64, n_layers=1, n_heads=4, n_kv_heads=1,
                    vocab_size=8, max_seq_len=8, weight_type=0).validate()
    with pytest.raises(CheckpointError, match="cannot read"):
        read_header(tmp_path / "absent.bin")


# ---------------------------------------------------------------- version 2

def _mixed_config(tokenizer_size: int = 0) -> ModelConfig:
    """tiny, untied, with every weight type: Q8_0 embedding, Q4_1 wq, int8 wk, f32 wv..."""
    base = dataclasses.replace(TINY, tied_embeddings=False, weight_type=WEIGHT_Q4_1)
    kinds = {"tok_embedding": WEIGHT_Q8_0, "wk": WEIGHT_INT8, "wv": WEIGHT_F32,
             "classifier": WEIGHT_Q8_0}
    types = tuple(kinds.get(name, WEIGHT_Q4_1) for name, _ in block_order(base))
    return dataclasses.replace(base, tensor_types=types, group_size=32,
                               tokenizer_size=tokenizer_size)


def _random_tensors(cfg: ModelConfig, seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    t: dict[str, object] = {}
    for sec in layout(cfg):
        a = rng.standard_normal(sec.shape).astype(np.float32)
        if sec.layer is None:
            t[sec.name] = a
        else:
            t.setdefault(sec.name, []).append(a)  # type: ignore[union-attr]
    return t


def test_int8_and_f32_files_stay_version_1(tmp_path):
    for wt in ("int8", "f32"):
        synthesize(tmp_path / f"{wt}.bin", "tiny", seed=1, weight_type=wt)
        raw = (tmp_path / f"{wt}.bin").read_bytes()
        assert struct.unpack_from("<I", raw, 8) == (1,)
        assert raw[60:HEADER_SIZE] == bytes(HEADER_SIZE - 60)
        assert len(raw) == checkpoint_size(read_header(tmp_path / f"{wt}.bin"))


def test_version_2_round_trip_mixed_types_and_tokenizer(tmp_path):
    blob = bytes(range(256)) * 3 + b"end"
    cfg = _mixed_config(len(blob))
    assert cfg.version == 2 and cfg.weight_type == WEIGHT_PER_TENSOR
    assert cfg.weight_name == "q8_0+q4_1+int8+f32"
    t = _random_tensors(cfg)
    t["tokenizer"] = blob
    p = tmp_path / "v2.bin"
    write_checkpoint(p, cfg, t)
    raw = p.read_bytes()
    assert struct.unpack_from("<2I", raw, 8) == (2, 64)
    assert struct.unpack_from("<3I", raw, 40) == (255, 32, 0)  # per tensor, int8 group, untied
    n = len(cfg.tensor_types)
    assert struct.unpack_from("<3I", raw, 60) == (n, 32, len(blob))
    assert list(struct.unpack_from(f"<{n}I", raw, HEADER_SIZE)) == list(cfg.tensor_types)
    assert all(sec.offset % 32 == 0 for sec in layout(cfg))
    assert raw[tokenizer_offset(cfg):] == blob and len(raw) == checkpoint_size(cfg)
    ck = load_checkpoint(p)
    assert ck.config == cfg and ck.tokenizer == blob
    emb, wq, wk, wv = (ck.tok_embedding, ck.layers["wq"][1], ck.layers["wk"][0],
                       ck.layers["wv"][1])
    assert isinstance(emb, GGMLBlock) and emb.kind == "q8_0"
    assert isinstance(wq, GGMLBlock) and wq.kind == "q4_1"
    assert isinstance(wk, QuantBlock) and wk.group_size == 32
    assert isinstance(wv, np.ndarray) and np.array_equal(wv, t["wv"][1])  # type: ignore[index]
    assert np.array_equal(wq.raw, quantize_blocks(t["wq"][1], "q4_1"))  # type: ignore[index]
    # Q4_1 keeps each value within about half a step ((max - min) / 15 / 2) of its block
    w = t["wq"][1].reshape(-1, 32)  # type: ignore[index]
    step = ((w.max(axis=1) - w.min(axis=1)) / 15)[:, None]
    err = np.abs(as_float(wq).reshape(-1, 32) - w)
    assert np.all(err <= 0.51 * step + 1e-3 * np.abs(w).max())
    assert np.array_equal(ck.rms_ffn, t["rms_ffn"])


def test_uniform_q8_0_config_and_raw_blocks(tmp_path):
    cfg = dataclasses.replace(TINY, weight_type=WEIGHT_Q8_0)
    assert cfg.tensor_types == (WEIGHT_Q8_0,) * 15 and cfg.version == 2
    assert cfg.tokenizer_size == 0 and cfg.group_size == 0
    t = _random_tensors(cfg, seed=4)
    w = CheckpointWriter(tmp_path / "q.bin", cfg)
    for sec in layout(cfg):
        a = t[sec.name] if sec.layer is None else t[sec.name][sec.layer]  # type: ignore[index]
        if sec.is_block:
            with pytest.raises(CheckpointError, match="is not"):
                w.put_raw(sec.name, np.zeros((1, 5), np.uint8))
            w.put_raw(sec.name, quantize_blocks(a, "q8_0"))  # type: ignore[arg-type]
        else:
            w.put(sec.name, a)  # type: ignore[arg-type]
    w.close()
    direct = tmp_path / "direct.bin"
    write_checkpoint(direct, cfg, t)
    assert (tmp_path / "q.bin").read_bytes() == direct.read_bytes()
    assert load_checkpoint(direct).tokenizer is None


def test_tokenizer_makes_an_int8_file_version_2(tmp_path):
    cfg = dataclasses.replace(TINY, tokenizer_size=4)
    assert cfg.version == 2 and cfg.tensor_types == (WEIGHT_INT8,) * 15
    t = _random_tensors(cfg)
    with pytest.raises(CheckpointError, match="missing tokenizer"):
        write_checkpoint(tmp_path / "a.bin", cfg, t)
    t["tokenizer"] = b"abc"
    with pytest.raises(CheckpointError, match="tokenizer is 3 bytes, the header says 4"):
        write_checkpoint(tmp_path / "a.bin", cfg, t)
    assert not list(tmp_path.iterdir())
    t["tokenizer"] = b"abcd"
    write_checkpoint(tmp_path / "a.bin", cfg, t)
    assert load_checkpoint(tmp_path / "a.bin").tokenizer == b"abcd"


def test_q_blocks_need_rows_of_32():
    cfg = ModelConfig(dim=48, hidden_dim=64, n_layers=1, n_heads=4, n_kv_heads=2,
                      vocab_size=8, max_seq_len=8, weight_type=WEIGHT_Q4_1)
    with pytest.raises(CheckpointError, match="multiple of 32"):
        cfg.validate()


@pytest.fixture
def v2_file(tmp_path):
    cfg = _mixed_config(5)
    t = _random_tensors(cfg)
    t["tokenizer"] = b"token"
    p = tmp_path / "v2.bin"
    write_checkpoint(p, cfg, t)
    return p


def _u32(b: bytes, off: int, v: int) -> bytes:
    return b[:off] + struct.pack("<I", v) + b[off + 4:]


@pytest.mark.parametrize("change, message", [
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\0", "extra bytes"),
    (lambda b: _u32(b, 40, 1), "version 2 needs weight_type 255"),
    (lambda b: _u32(b, 64, 16), "alignment 16"),
    (lambda b: _u32(b, 60, 14), "type table has 14 entries, the model has 16"),
    (lambda b: _u32(b, HEADER_SIZE + 4, 9), r"wq\[0\]: unknown weight type 9"),
    (lambda b: _u32(b, 68, 6), "truncated"),
    (lambda b: b[:HEADER_SIZE + 8], "truncated type table"),
    (lambda b: _u32(b, 44, 48), "group_size 48"),
])
def test_version_2_reader_rejects_bad_files(v2_file, change, message):
    v2_file.write_bytes(change(v2_file.read_bytes()))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(v2_file)
