"""smolprobe's Q8_0/Q4_1 path on the host: version 2 checkpoints, the integer matvec.

The host build of user/smolprobe/ and the model library (tests/host) must print tokens and
final logits bit-for-bit equal to the numpy reference's integer arithmetic
(``reference.generate(..., arith="int")``, docs/checkpoint.md "Quantized matvec in
integers") on small version 2 checkpoints that mix every weight type (written with
format.py's writer and imported from a small GGUF), and on the real SmolLM2-135M-Instruct
imported from its GGUF when that file is present.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_model_gguf import Geo, write_gguf

from nexos.model import generate, load_checkpoint
from nexos.model.format import (
    WEIGHT_F32,
    WEIGHT_INT8,
    WEIGHT_PER_TENSOR,
    WEIGHT_Q4_1,
    WEIGHT_Q8_0,
    ModelConfig,
    block_order,
    write_checkpoint,
)
from nexos.model.gguf_import import import_gguf
from support import needs_smollm2, patched_copy

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")

F32 = np.float32


@pytest.fixture(scope="module")
def host_bin(host_programs: Path) -> Path:
    return host_programs / "smolprobe"


def run(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600)


def line(p: subprocess.CompletedProcess[str], prefix: str) -> str:
    for ln in p.stdout.splitlines():
        if ln.startswith(prefix):
            return ln[len(prefix):]
    raise AssertionError(f"no {prefix!r} line in {p.stdout!r} {p.stderr!r}")


def tokens_and_logits(binary: Path, model: Path, prompt: list[int], gen: int,
                      *extra: str) -> tuple[list[int], list[str]]:
    p = run(binary, "--model", str(model), "--prompt-tokens", ",".join(map(str, prompt)),
            "--gen-len", str(gen), "--print-tokens", "--print-logits", *extra)
    assert p.returncode == 0, p.stderr
    toks = [int(t) for t in line(p, "[smolprobe] tokens=").split(",")]
    return toks, line(p, "[smolprobe] logits=").split(",")


def printed(logits: np.ndarray) -> list[str]:
    """The float32 logits as smolprobe's print_list prints them: |v| * 1e6 + 0.5 in double,
    truncated to an integer of micro-units (so the text pins down the float32 value)."""
    out = []
    for v in logits.astype(np.float64).tolist():
        micro = int(abs(v) * 1e6 + 0.5)
        sign = "-" if v < 0 and micro else ""
        out.append(f"{sign}{micro // 1000000}.{micro % 1000000:06d}")
    return out


def mixed_types(cfg: ModelConfig, pick) -> tuple[int, ...]:
    return tuple(pick(name, layer) for name, layer in block_order(cfg))


GEOS = {
    # every block Q4_1 but the Q8_0 embedding (the real model's table), tied
    "q41": (ModelConfig(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2,
                        vocab_size=160, max_seq_len=64, rope_theta=100000.0),
            lambda n, i: WEIGHT_Q8_0 if n == "tok_embedding" else WEIGHT_Q4_1),
    # every type in one file, untied; the classifier has an odd row count
    "mixed": (ModelConfig(dim=96, hidden_dim=160, n_layers=3, n_heads=6, n_kv_heads=2,
                          vocab_size=211, max_seq_len=64, tied_embeddings=False,
                          group_size=32),
              lambda n, i: {"tok_embedding": WEIGHT_Q4_1, "wq": WEIGHT_Q8_0,
                            "wk": WEIGHT_INT8, "wv": WEIGHT_F32, "wo": WEIGHT_Q4_1,
                            "w_gate": WEIGHT_Q4_1, "w_down": WEIGHT_Q8_0,
                            "w_up": WEIGHT_Q4_1, "classifier": WEIGHT_Q8_0}[n]),
}


def synth_q(path: Path, cfg: ModelConfig, pick, seed: int) -> Path:
    """A version 2 checkpoint of random weights with the block types ``pick`` chooses."""
    cfg = dataclasses.replace(cfg, weight_type=WEIGHT_PER_TENSOR,
                              tensor_types=mixed_types(cfg, pick))
    rng = np.random.default_rng(seed)
    qd = cfg.n_heads * cfg.head_dim
    shapes = {"wq": (qd, cfg.dim), "wk": (cfg.kv_dim, cfg.dim), "wv": (cfg.kv_dim, cfg.dim),
              "wo": (cfg.dim, qd), "w_gate": (cfg.hidden_dim, cfg.dim),
              "w_down": (cfg.dim, cfg.hidden_dim), "w_up": (cfg.hidden_dim, cfg.dim)}
    t: dict[str, object] = {
        "rms_att": (1 + 0.1 * rng.standard_normal((cfg.n_layers, cfg.dim))).astype(F32),
        "rms_ffn": (1 + 0.1 * rng.standard_normal((cfg.n_layers, cfg.dim))).astype(F32),
        "rms_final": (1 + 0.1 * rng.standard_normal(cfg.dim)).astype(F32),
        "tok_embedding": rng.standard_normal((cfg.vocab_size, cfg.dim)).astype(F32),
        "classifier": (rng.standard_normal((cfg.vocab_size, cfg.dim)) * 0.3).astype(F32),
    }
    for name, (r, c) in shapes.items():
        t[name] = (rng.standard_normal((cfg.n_layers, r, c)) * 1.5 / np.sqrt(c)).astype(F32)
    write_checkpoint(path, cfg, t)
    return path


def write_q_checkpoints(d: Path) -> dict[str, Path]:
    """The small version 2 checkpoints in d: one per GEOS entry, and one imported from a
    small GGUF (tests/llm/test_smolprobe.py puts the same files on its guest image)."""
    out = {name: synth_q(d / f"{name}.bin", cfg, pick, seed=11)
           for name, (cfg, pick) in GEOS.items()}
    write_gguf(d / "tiny.gguf", Geo(), seed=4, tied=False)
    import_gguf(d / "tiny.gguf", d / "gguf.bin")
    out["gguf"] = d / "gguf.bin"
    return out


@pytest.fixture(scope="module")
def qckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_q_checkpoints(tmp_path_factory.mktemp("qckpt"))


REQUESTS = [([1, 2, 3], 10, 0.0, 0), ([5], 20, 0.0, 0), ([7, 8, 9, 10], 12, 0.8, 42)]


@pytest.mark.parametrize("name", ["q41", "mixed", "gguf"])
@pytest.mark.parametrize("prompt,gen,temp,seed", REQUESTS)
def test_q_tokens_and_logits_equal_the_integer_reference(host_bin, qckpts, name, prompt, gen,
                                                         temp, seed):
    toks, logits = tokens_and_logits(host_bin, qckpts[name], prompt, gen, "--temperature",
                                     str(temp), "--seed", str(seed))
    ref = generate(qckpts[name], prompt, gen, temperature=temp, seed=seed, arith="int")
    assert toks == ref.tokens
    assert logits == printed(ref.final_logits)


def test_q_bench_reports_the_q4_1_matvec(host_bin, qckpts):
    p = run(host_bin, "--model", str(qckpts["q41"]), "--bench")
    assert p.returncode == 0, p.stderr
    kv = dict(w.split("=") for w in line(p, "[smolprobe] bench_q4_1 ").split())
    assert set(kv) == {"matvec_q4_1_macs_per_s", "peak_int8_macs_per_s", "ratio"}
    print(f"[host] bench_q4_1 {kv}")


def test_version_2_errors(host_bin, qckpts, tmp_path):
    good = qckpts["q41"]
    raw = good.read_bytes()
    (tmp_path / "trunc.bin").write_bytes(raw[:-7])
    (tmp_path / "long.bin").write_bytes(raw + b"\0" * 32)
    table = 256
    cases = {
        "truncated": (tmp_path / "trunc.bin", "truncated"),
        "extended": (tmp_path / "long.bin", "has extra bytes"),
        "wtype": (patched_copy(good, tmp_path / "w.bin", 40, struct.pack("<I", 1)),
                  "weight_type 255"),
        "align": (patched_copy(good, tmp_path / "a.bin", 64, struct.pack("<I", 16)), "alignment"),
        "n_blocks": (patched_copy(good, tmp_path / "n.bin", 60, struct.pack("<I", 5)),
                     "type table"),
        "type": (patched_copy(good, tmp_path / "t.bin", table + 4, struct.pack("<I", 9)),
                 "unknown weight type 9"),
        "tok_size": (patched_copy(good, tmp_path / "k.bin", 68, struct.pack("<I", 64)), "bytes"),
    }
    for what, (path, msg) in cases.items():
        p = run(host_bin, "--model", str(path), "--prompt-tokens", "1", "--gen-len", "1")
        assert p.returncode == 1, (what, p.stdout)
        assert p.stderr.startswith("[smolprobe] error: model: "), (what, p.stderr)
        assert msg in p.stderr and len(p.stderr.splitlines()) == 1, (what, p.stderr)


def test_non_finite_scale_is_an_error(host_bin, qckpts, tmp_path):
    """A Q4_1 block whose f16 d is infinite: the loader refuses it."""
    ck = load_checkpoint(qckpts["q41"])
    from nexos.model.format import layout
    sec = next(s for s in layout(ck.config) if s.name == "wq" and s.layer == 1)
    bad = patched_copy(qckpts["q41"], tmp_path / "inf.bin", sec.offset + 20 * 3,
                   np.float16(np.inf).tobytes())
    p = run(host_bin, "--model", str(bad), "--prompt-tokens", "1", "--gen-len", "1")
    assert p.returncode == 1 and "infinite or NaN" in p.stderr, p.stderr


# ---------------------------------------------------------------- the real model

# "The capital of France is", and ten ids of a ChatML turn (<|im_start|> ... <|im_end|>)
REAL_PROMPTS = [[504, 3575, 282, 4649, 314], [1, 4093, 198, 2683, 359, 253, 5356, 5646, 11173, 2]]


@needs_smollm2
@pytest.mark.parametrize("prompt", REAL_PROMPTS)
def test_real_model_equals_the_integer_reference(host_bin, smollm2_checkpoint, prompt,
                                                 reference_generate):
    toks, logits = tokens_and_logits(host_bin, smollm2_checkpoint, prompt, 20)
    ref = reference_generate(smollm2_checkpoint, prompt, 20, arith="int")
    assert toks == ref.tokens
    assert logits == printed(ref.final_logits)


# ---------------------------------------------------------------- text in, text out

@needs_smollm2
def test_prompt_text_in_text_out(host_bin, smollm2_checkpoint, reference_generate):
    from nexos.parse import parse_smolprobe

    p = run(host_bin, "--model", str(smollm2_checkpoint), "--prompt", "The capital of France is",
            "--gen-len", "6", "--print-tokens")
    assert p.returncode == 0, p.stderr
    r = parse_smolprobe(p.stdout)
    assert r.prompt == (504, 3575, 282, 4649, 314) and r.generated is not None
    assert (r.generated.tokens, r.generated.stopped_at_eos) == (6, 0)
    assert list(r.tokens or ()) == reference_generate(smollm2_checkpoint, list(r.prompt), 6).tokens
    assert r.text is not None and r.text.startswith(" Paris.\n")


@needs_smollm2
def test_chat_stops_at_im_end_and_counts_what_ran(host_bin, smollm2_checkpoint):
    from nexos.parse import parse_smolprobe

    p = run(host_bin, "--model", str(smollm2_checkpoint), "--chat",
            "What is the capital of France?", "--print-tokens")
    assert p.returncode == 0, p.stderr
    r = parse_smolprobe(p.stdout)
    assert r.request and r.generated and r.tokens and r.summary and r.prompt
    n = r.generated.tokens
    assert r.generated.stopped_at_eos == 1 and r.tokens[-1] == 2 and len(r.tokens) == n < 64
    assert r.prompt[:3] == (1, 9690, 198) and r.prompt[-4:] == (1, 520, 9531, 198)  # ChatML
    assert "Paris" in (r.text or "") and "<|im_end|>" not in (r.text or "")
    # the eos is generated, not fed: P + n - 1 rows, 30 layers x 2 regions of 768 B rows
    rows = r.request.prompt_tokens + n - 1
    assert r.summary.actual_mapped_pages == 60 * -(-rows * 768 // 4096)


def test_text_errors(host_bin, qckpts):
    model = str(qckpts["q41"])   # no tokenizer
    cases = {
        ("--prompt", "hi"): "--prompt needs the model's tokenizer",
        ("--chat", "hi"): "--chat needs the model's tokenizer",
        ("--prompt-tokens", "1", "--gen-len", "2", "--stop-at-eos"):
            "--stop-at-eos needs the model's tokenizer",
        ("--prompt", "a", "--prompt-tokens", "1"): "give one of them",
        ("--prompt", "a", "--chat", "b"): "not two",
        ("--prompt", "a", "--samples", "2"): "--samples takes --prompt-tokens",
        ("--prompt",): "missing value",
    }
    for args, msg in cases.items():
        p = run(host_bin, "--model", model, *args)
        assert p.returncode == 1 and p.stderr.startswith("[smolprobe] error: "), (args, p)
        assert msg in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.stderr)


def test_text_line_escapes_round_trip():
    from nexos.parse import unescape_text

    assert unescape_text(r"a\\b\nc\td\x01 e\x20\x20") == "a\\b\nc\td\x01 e  "


def test_corrupt_version_2_files_never_crash(host_bin, qckpts, tmp_path):
    """Random bytes over the header, the type table and the first block scales: smolprobe
    exits 0 or 1 (an `error:` line), never with a signal."""
    raw = qckpts["mixed"].read_bytes()
    rng = np.random.default_rng(7)
    for i in range(60):
        b = bytearray(raw)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(8, 1200))
            b[at] = int(rng.integers(0, 256))
        path = tmp_path / f"c{i}.bin"
        path.write_bytes(bytes(b))
        p = run(host_bin, "--model", str(path), "--prompt-tokens", "1,2", "--gen-len", "3")
        assert p.returncode in (0, 1), (i, p.returncode, p.stderr)
        assert p.returncode == 0 or p.stderr.startswith("[smolprobe] error: "), p.stderr


# ---------------------------------------------------------------- prefill in blocks

def fed_three_ways(binary: Path, model: Path, args: list[str]) -> dict[int, tuple[str, ...]]:
    """For --prefill-block 1 (one position at a time), 2, 5 and 16 (the default): the
    generated tokens, the final logits and the hash of every K/V row written."""
    out = {}
    for block in (1, 2, 5, 16):
        p = run(binary, "--model", str(model), *args, "--prefill-block", str(block),
                "--print-tokens", "--print-logits", "--test-kv-hash")
        assert p.returncode == 0, p.stderr
        out[block] = (line(p, "[smolprobe] tokens="), line(p, "[smolprobe] logits="),
                      line(p, "[smolprobe] test_kv_hash "))
    return out


@pytest.mark.parametrize("name", ["q41", "mixed", "gguf"])
def test_blocked_prefill_equals_one_position_at_a_time(host_bin, qckpts, name):
    prompt = ",".join(str((3 + 7 * i) % 90) for i in range(23))  # blocks of 16 + 7, 5 + 3 ...
    runs = fed_three_ways(host_bin, qckpts[name], ["--prompt-tokens", prompt, "--gen-len", "4"])
    assert len(set(runs.values())) == 1, runs


@needs_smollm2
def test_blocked_prefill_of_the_real_model_is_bit_for_bit(host_bin, smollm2_checkpoint):
    runs = fed_three_ways(host_bin, smollm2_checkpoint,
                          ["--chat", "What is the capital of France?"])
    assert len(set(runs.values())) == 1, runs
    # the perplexity's logits come from the block for every position
    ppl = {b: line(run(host_bin, "--model", str(smollm2_checkpoint), "--perplexity",
                       "The capital of France is Paris, and its river is the Seine.",
                       "--prefill-block", str(b)), "[smolprobe] perplexity ")
           for b in (1, 5, 16)}
    assert len(set(ppl.values())) == 1, ppl


def test_prefill_block_errors(host_bin, qckpts):
    for bad in ("0", "-1", "65", "x"):
        p = run(host_bin, "--model", str(qckpts["q41"]), "--prompt-tokens", "1,2",
                "--gen-len", "1", "--prefill-block", bad)
        assert p.returncode == 1 and p.stderr.startswith("[smolprobe] error: --prefill-block")
        assert len(p.stderr.splitlines()) == 1, p.stderr


# ---------------------------------------------------------------- the prompt cache

def cached_chat(binary: Path, model: Path, question: str, cache: Path
                ) -> tuple[tuple[str, str], str]:
    """--chat with --prompt-cache: (tokens, K/V rows' hash) and the prompt_cache line."""
    p = run(binary, "--model", str(model), "--chat", question, "--prompt-cache", str(cache),
            "--print-tokens", "--test-kv-hash")
    assert p.returncode == 0, p.stderr
    return ((line(p, "[smolprobe] tokens="), line(p, "[smolprobe] test_kv_hash ")),
            line(p, "[smolprobe] prompt_cache "))


@needs_smollm2
def test_prompt_cache_reuses_the_common_prefix_bit_for_bit(host_bin, smollm2_checkpoint,
                                                            tmp_path):
    cache = tmp_path / "chat.kv"
    france, color = "What is the capital of France?", "Name a color."
    alone = {q: cached_chat(host_bin, smollm2_checkpoint, q, tmp_path / "none")[0]
             for q in (france, color)}
    (tmp_path / "none").unlink()
    got = [cached_chat(host_bin, smollm2_checkpoint, q, cache) for q in (france, france, color)]
    assert [g[1] for g in got] == ["reused_tokens=0 saved_tokens=37",
                                   "reused_tokens=36 saved_tokens=0",   # all but the last
                                   "reused_tokens=24 saved_tokens=0"]   # the system turn + user
    assert [g[0] for g in got] == [alone[france], alone[france], alone[color]]


@needs_smollm2
def test_prompt_cache_of_another_model_or_a_broken_file_is_not_used(host_bin, qckpts,
                                                                     smollm2_checkpoint, tmp_path):
    cache = tmp_path / "chat.kv"
    first = cached_chat(host_bin, smollm2_checkpoint, "Hi", cache)
    data = cache.read_bytes()
    for broken in (data[:100], data[:-1000], data[:20] + b"\xff" * 4 + data[24:]):
        cache.write_bytes(broken)
        again = cached_chat(host_bin, smollm2_checkpoint, "Hi", cache)
        assert again[0] == first[0]
        assert again[1] in ("reused_tokens=0 saved_tokens=23", first[1]), again[1]
    # a cache file of another model: run on the synthetic one, which has no tokenizer
    p = run(host_bin, "--model", str(qckpts["q41"]), "--prompt-tokens", "1,2,3", "--gen-len", "2",
            "--prompt-cache", str(cache), "--print-tokens")
    assert p.returncode == 0 and line(p, "[smolprobe] prompt_cache ") == \
        "reused_tokens=0 saved_tokens=3", p.stdout


def test_prompt_cache_errors(host_bin, qckpts, tmp_path):
    for args in (["--samples", "2", "--temperature", "1"], ["--bench"]):
        p = run(host_bin, "--model", str(qckpts["q41"]), "--prompt-tokens", "1,2", "--gen-len",
                "2", "--prompt-cache", str(tmp_path / "x.kv"), *args)
        assert p.returncode == 1 and "--prompt-cache goes with one request" in p.stderr, p
        assert len(p.stderr.splitlines()) == 1
