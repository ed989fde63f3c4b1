"""smolprobe --perplexity (docs/smolprobe.md, "Perplexity") against the numpy reference.

The host build (tests/host) must print the integer reference's figures
(``reference.perplexity(..., arith="int")``) digit for digit, on a small version 2 test
checkpoint with a byte-level tokenizer and on the real SmolLM2-135M-Instruct; in the guest
(QEMU, lazy1-cow0, the default real model) the perplexity must lie within 2 % of the
float32 reference over the same dequantised weights.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_smolprobe_q import mixed_types

from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.model.format import (
    WEIGHT_PER_TENSOR,
    WEIGHT_Q4_1,
    WEIGHT_Q8_0,
    ModelConfig,
    write_checkpoint,
)
from nexos.model.reference import perplexity
from nexos.model.tokenizer import (
    TYPE_CONTROL,
    TYPE_NORMAL,
    TokenizerSpec,
    build_blob,
    byte_to_unicode,
)
from nexos.parse import SmolprobeResult, parse_smolprobe
from support import needs_smollm2

ROOT = Path(__file__).resolve().parents[2]

F32 = np.float32

# The opening of the Gettysburg Address (public domain): 62 SmolLM2 tokens, so that the
# float32 reference takes well under a minute.
GETTYSBURG = ("Four score and seven years ago our fathers brought forth on this continent, "
              "a new nation, conceived in Liberty, and dedicated to the proposition that all "
              "men are created equal. Now we are engaged in a great civil war, testing "
              "whether that nation, or any nation so conceived and so dedicated, can long "
              "endure.")

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")


def micro(v: float) -> str:
    """v as smolprobe prints it: v * 1e6 + 0.5 in double, truncated, 6 decimals (values
    above 10^12 as 10^12)."""
    m = int(min(v, 1e12) * 1e6 + 0.5)
    return f"{m // 1000000}.{m % 1000000:06d}"


@pytest.fixture(scope="module")
def host_bin(host_programs: Path) -> Path:
    return host_programs / "smolprobe"


def score(binary: Path, model: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), "--model", str(model), "--perplexity", text, *extra],
                          capture_output=True, text=True, timeout=600)


def perplexity_line(r: SmolprobeResult) -> str:
    return next(rec.line for rec in r.records if rec.kind == "perplexity")


def byte_tokenizer() -> bytes:
    """Three control tokens, the 256 byte tokens and a few merges (no GGUF needed)."""
    b2u = byte_to_unicode()
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [b2u[b] for b in range(256)]
    types = [TYPE_CONTROL] * 3 + [TYPE_NORMAL] * 256
    merges = [("e", "n"), ("Ġ", "t"), ("Ġt", "h"), ("a", "n"), ("o", "r"), ("Ġ", "a")]
    for a, b in merges:
        tokens.append(a + b)
        types.append(TYPE_NORMAL)
    return build_blob(TokenizerSpec(tokens, types, merges, bos=1, eos=2))


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random Q8_0/Q4_1 weights, 300-token vocabulary, the byte tokenizer above."""
    cfg = ModelConfig(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2,
                      vocab_size=300, max_seq_len=128, rope_theta=100000.0)

    def pick(name: str, layer: int) -> int:
        return WEIGHT_Q8_0 if name in ("tok_embedding", "wq", "w_down") else WEIGHT_Q4_1

    tok = byte_tokenizer()
    cfg = dataclasses.replace(cfg, weight_type=WEIGHT_PER_TENSOR,
                              tensor_types=mixed_types(cfg, pick), tokenizer_size=len(tok))
    rng = np.random.default_rng(5)
    qd = cfg.n_heads * cfg.head_dim
    shapes = {"wq": (qd, cfg.dim), "wk": (cfg.kv_dim, cfg.dim), "wv": (cfg.kv_dim, cfg.dim),
              "wo": (cfg.dim, qd), "w_gate": (cfg.hidden_dim, cfg.dim),
              "w_down": (cfg.dim, cfg.hidden_dim), "w_up": (cfg.hidden_dim, cfg.dim)}
    t: dict[str, object] = {
        "rms_att": np.ones((cfg.n_layers, cfg.dim), dtype=F32),
        "rms_ffn": np.ones((cfg.n_layers, cfg.dim), dtype=F32),
        "rms_final": np.ones(cfg.dim, dtype=F32),
        "tok_embedding": (0.1 * rng.standard_normal((cfg.vocab_size, cfg.dim))).astype(F32),
        "tokenizer": tok,
    }
    for name, (r, c) in shapes.items():
        t[name] = (rng.standard_normal((cfg.n_layers, r, c)) / np.sqrt(c)).astype(F32)
    path = tmp_path_factory.mktemp("small") / "small.bin"
    write_checkpoint(path, cfg, t)
    return path


@needs_gcc
def test_small_model_equals_the_integer_reference(host_bin, small_ckpt):
    p = score(host_bin, small_ckpt, "Then the ant ran north, and the tern sang.")
    assert p.returncode == 0, p.stderr
    r = parse_smolprobe(p.stdout)
    assert r.mode == "perplexity" and r.prompt is not None and r.perplexity is not None
    ref = perplexity(small_ckpt, list(r.prompt), arith="int")
    assert perplexity_line(r) == (f"perplexity tokens={ref.tokens} nll={micro(ref.nll)} "
                                  f"ppl={micro(ref.ppl)}")
    assert r.request is not None and r.request.gen_tokens == 0
    assert r.summary is not None and r.summary.actual_mapped_pages > 0


@needs_gcc
@pytest.mark.parametrize("args,message", [
    (("x",), "scoring needs at least 2"),
    (("Four score and seven", "--gen-len", "3"), "--perplexity scores its text alone"),
    (("Four score and seven", "--seq-len", "3"), "exceeds seq-len 3"),
])
def test_errors(host_bin, small_ckpt, args, message):
    p = subprocess.run([str(host_bin), "--model", str(small_ckpt), "--perplexity", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.startswith("[smolprobe] error: ") and message in p.stderr
    parse_smolprobe(p.stdout + p.stderr)  # an error run of the schema


@needs_gcc
def test_no_tokenizer_is_an_error(host_bin, tmp_path):
    from nexos.model.synth import synthesize

    synthesize(tmp_path / "t.bin", preset="tiny")
    p = score(host_bin, tmp_path / "t.bin", "Four score")
    assert p.returncode == 1 and "--perplexity needs the model's tokenizer" in p.stderr


@needs_gcc
@needs_smollm2
def test_real_model_equals_the_integer_reference(host_bin, smollm2_checkpoint):
    p = score(host_bin, smollm2_checkpoint, GETTYSBURG)
    assert p.returncode == 0, p.stderr
    r = parse_smolprobe(p.stdout)
    assert r.prompt is not None and 60 <= len(r.prompt) <= 100
    ref = perplexity(smollm2_checkpoint, list(r.prompt), arith="int")
    assert perplexity_line(r) == (f"perplexity tokens={ref.tokens} nll={micro(ref.nll)} "
                                  f"ppl={micro(ref.ppl)}")


@pytest.mark.long
@needs_smollm2
def test_guest_within_two_percent_of_float32(build_kernel, smollm2_checkpoint, capsys):
    cfg = BuildConfig(1, 0)
    build_kernel(cfg, llm=True)  # makes smollm2_checkpoint, the image's /model.bin
    with QemuSession.for_config(cfg, ROOT, llm=True) as qs:
        out = qs.run(f'smolprobe --perplexity "{GETTYSBURG}"', timeout=900).output
    r = parse_smolprobe(out.replace("\r", ""))
    assert r.mode == "perplexity" and r.prompt is not None and r.perplexity is not None, out
    ref = perplexity(smollm2_checkpoint, list(r.prompt), arith="float")
    diff = abs(r.perplexity.ppl - ref.ppl) / ref.ppl
    with capsys.disabled():
        print(f"\nperplexity over {ref.tokens} tokens: guest {r.perplexity.ppl:.6f}, "
              f"float32 reference {ref.ppl:.6f}, {100 * diff:.2f} % apart")
    assert diff < 0.02
