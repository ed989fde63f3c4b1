"""Checkpoint header, size and loader checks (nexos.model.format)."""

import dataclasses
import struct

import numpy as np
import pytest

from nexos.model.format import (
    HEADER_SIZE,
    CheckpointError,
    ModelConfig,
    QuantBlock,
    checkpoint_size,
    load_checkpoint,
    pack_header,
    read_header,
    unpack_header,
    write_checkpoint,
)
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
    (lambda b: b[:8] + struct.pack("<I", 2) + b[12:], "version 2"),
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
