"""The prepared checkpoint (format version 3, docs/checkpoint.md "Version 3: prepared"):
the same tensors as a version 1 or 2 file, stored in the form smolprobe's integer matvec
computes on, so that the model library maps the file and never writes to it.

Versions 1 and 2 keep the weights as they came (int8 unbiased, GGUF's Q8_0/Q4_1 blocks);
the C loader prepares them in place, which touches, and so copies, every page. Version 3
is that preparation done once, here: int8 weights biased by +128, each Q8_0/Q4_1 block's
quants packed to the front of its section and its scales after them as fixed-point
int16 (qblocks.QMatrix), the row exponents (and the embedding's f16 scales) in a derived
section after the tensors. Each tensor section has the size and offset it has in a
version 2 file of the same model.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np

from nexos.model.format import (
    WEIGHT_PER_TENSOR,
    Checkpoint,
    CheckpointError,
    ModelConfig,
    QuantBlock,
    Section,
    align_up,
    check_size,
    checkpoint_size,
    layout,
    load_checkpoint,
    pack_header,
    read_header,
    tensors_end,
)
from nexos.model.qblocks import Q4_1, QK, GGMLBlock, QMatrix, block_fields


def prepared_config(cfg: ModelConfig) -> ModelConfig:
    """The version 3 config of a version 1 or 2 file: one weight type per block (version 2's
    layout), prepared."""
    return dataclasses.replace(cfg, weight_type=WEIGHT_PER_TENSOR,
                               tensor_types=tuple(cfg.block_types()), prepared=True)


def _qblock(blk: GGMLBlock, embedding: bool) -> tuple[bytes, bytes]:
    """A Q8_0/Q4_1 block prepared: (section bytes, derived bytes). The section holds the
    quants (Q8_0: 32 bytes a block, biased by +128; Q4_1: the 16 nibble bytes as GGUF
    packs them), then the fixed-point scales (Q8_0: D; Q4_1: D, M pairs) as int16, block
    after block; derived holds, for the embedding, its f16 d (and m) bits, then the row
    exponents ew as int8, each padded to ALIGN."""
    rows, cols = blk.shape
    nb = cols // QK
    raw = np.asarray(blk.raw).reshape(rows, nb, -1)
    qm = QMatrix.prepare(blk)
    if blk.kind == Q4_1:
        quants = raw[:, :, 4:]
        scales = np.stack([qm.D, qm.M], axis=2)  # type: ignore[list-item]
    else:
        quants = raw[:, :, 2:] ^ np.uint8(0x80)
        scales = qm.D[:, :, None]
    if np.abs(scales).max(initial=0) >= 2**15 or np.abs(qm.ew).max(initial=0) >= 2**7:
        raise CheckpointError("a Q8_0/Q4_1 scale does not fit the prepared layout")
    section = quants.tobytes() + scales.astype("<i2").tobytes()
    derived = b""
    if embedding:
        f = block_fields(blk)
        bits = f.d_bits[:, :, None] if f.m_bits is None else np.stack([f.d_bits, f.m_bits], 2)
        d16 = bits.astype("<u2").tobytes()
        derived += d16 + bytes(align_up(len(d16)) - len(d16))
    ew = qm.ew.astype(np.int8).tobytes()
    return section, derived + ew + bytes(align_up(len(ew)) - len(ew))


def _section(ck: Checkpoint, sec: Section) -> np.ndarray | QuantBlock | GGMLBlock:
    if sec.layer is not None:
        return ck.layers[sec.name][sec.layer]
    return getattr(ck, sec.name)  # type: ignore[no-any-return]


def prepared_bytes(sec: Section, block: object) -> tuple[bytes, bytes]:
    """One tensor section of a version 3 file: (its bytes, its derived bytes)."""
    if isinstance(block, GGMLBlock):
        return _qblock(block, sec.name == "tok_embedding")
    if isinstance(block, QuantBlock):
        q = block.q.view(np.uint8) ^ np.uint8(0x80)
        return q.tobytes() + block.s.astype("<f4").tobytes(), b""
    return np.asarray(block, dtype="<f4").tobytes(), b""


def write_prepared(src: str | Path, out: str | Path) -> ModelConfig:
    """Write the version 3 form of the checkpoint at src to out (under a temporary name,
    renamed when complete; a version 3 src is copied); its config. CheckpointError on a bad
    src or an out that cannot be written."""
    out = Path(out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")  # two makes may race here
    cfg = read_header(src)
    try:
        if cfg.prepared:
            check_size(src, cfg)
            shutil.copyfile(src, tmp)
        else:
            cfg = _write(load_checkpoint(src), tmp)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"{out}: cannot write ({e.strerror or e})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return cfg


def _write(ck: Checkpoint, path: Path) -> ModelConfig:
    """The version 3 file of checkpoint ck at path; its config."""
    cfg = prepared_config(ck.config)
    derived = b""
    with open(path, "wb") as f:
        f.write(pack_header(cfg))
        for sec in layout(cfg):
            body, more = prepared_bytes(sec, _section(ck, sec))
            assert len(body) == sec.nbytes, (sec.name, len(body), sec.nbytes)
            f.write(bytes(sec.offset - f.tell()))
            f.write(body)
            derived += more
        f.write(bytes(align_up(f.tell()) - f.tell()))
        f.write(derived)
        assert f.tell() == tensors_end(cfg)
        if ck.tokenizer:
            f.write(bytes(align_up(f.tell()) - f.tell()))
            f.write(ck.tokenizer)
        assert f.tell() == checkpoint_size(cfg)
    return cfg
