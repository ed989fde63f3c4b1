"""smolprobe inside NexOS (QEMU): KV page accounting, numerics, importer round trip, errors.

Every expected number is computed here: page counts from the KV layout of docs/kvcache.md
(nexos.programs.kvcache), tokens and logits from the numpy reference
(nexos.model), whose arithmetic mirrors smolprobe's C operation for operation
(docs/checkpoint.md "Float arithmetic, exactly"). The only literals are the seed run's
figures (2880 pages, 180 active, 93%: docs/smolprobe.md, "The seed run").

Two kinds of boots: the build's own LLM image (build/<cfg>/fs-llm.img, the default model
as /model.bin: the real SmolLM2-135M-Instruct, whose reference is the integer arithmetic of
docs/checkpoint.md), and a test image made with build/host/mkfs holding
small checkpoints (float32, int8, and the Q8_0/Q4_1 ones of tests/llm/test_smolprobe_q.py), an
imported one, and broken files. Both the real model's and the Q8_0/Q4_1 checkpoints' tokens
and final logits must equal the reference's integer arithmetic bit for bit, as printed.

The float32 run at SmolLM-135M geometry uses 2 layers, not 30: the 30-layer float32 file
is ~540 MB and does not fit a 512 MiB guest. Every other size (dim 576, hidden 1536, 9/3
heads, vocab 49152) is the real one.

The NexOS shell does not expose exit statuses, so the error tests check what can be seen:
one `[smolprobe] error:` line, no `usertrap:`/`panic:`, and no page leak (freecheck's
free_pages equal before and after); tests/llm/test_smolprobe_host.py checks exit status 1.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from test_smolprobe_q import REAL_PROMPTS, printed, write_q_checkpoints
from test_smolprobe_q import REQUESTS as Q_REQUESTS

from nexos.machine.build import default_model as makefile_default_model
from nexos.machine.config import BuildConfig
from nexos.machine.qemu import QemuSession
from nexos.model import generate, load_checkpoint
from nexos.model.format import Checkpoint, ModelConfig
from nexos.model.hf_import import import_hf
from nexos.model.synth import synthesize
from nexos.parse import SmolprobeResult, parse_smolprobe
from nexos.programs.kvcache import (
    KvShape,
    active_pages_est,
    distinct_kv_pages,
    expected_verdict,
    max_kv_pages,
)

REPO = Path(__file__).resolve().parents[2]
LAZY, EAGER = BuildConfig(1, 0), BuildConfig(0, 0)
DEFAULT_ARGS = "--prompt-tokens 1,2,3 --gen-len 10"  # the seed run (docs/smolprobe.md)
FULL_RUN_TIMEOUT = 400.0                              # one full-size run under a busy host


# ------------------------------------------------------------------------ expectations

def check_accounting(res: SmolprobeResult, shape: KvShape, rows: int, lazy: bool) -> None:
    """The page numbers of one run against the formulas of docs/kvcache.md."""
    mx = max_kv_pages(shape)
    assert res.kv_capacity is not None and res.summary is not None
    assert res.reserve is not None and res.decode is not None
    assert res.kv_capacity.max_pages == res.summary.max_kv_pages == mx
    assert res.kv_capacity.active_pages_est == res.decode.active_pages_est \
        == active_pages_est(shape, rows)
    assert res.reserve.virtual_pages == mx
    want_reserve = 0 if lazy else mx
    want_decode = distinct_kv_pages(shape, rows) if lazy else 0
    assert (res.reserve.mapped_pages, res.decode.mapped_pages) == (want_reserve, want_decode)
    actual = want_reserve + want_decode
    assert res.summary.actual_mapped_pages == actual
    assert res.summary.saved_pages == mx - actual
    assert res.summary.saved_percent == 100 * (mx - actual) // mx
    assert res.verdict == expected_verdict(want_reserve, mx)
    # used_pages also counts page-table pages: at most one leaf table per 512 pages mapped
    # (plus the ends and an upper-level table).
    for ph in (res.reserve, res.decode):
        assert ph.mapped_pages <= ph.used_pages <= ph.mapped_pages + mx // 512 + 3


# ------------------------------------------------------------------------ running it

@dataclass
class Probe:
    """One smolprobe command: its output, parsed, plus the final logits if printed."""

    output: str
    res: SmolprobeResult
    logits: np.ndarray | None


def probe(s: QemuSession, args: str, timeout: float = FULL_RUN_TIMEOUT,
          prog: str = "smolprobe") -> Probe:
    out = s.run(f"{prog} {args}", timeout=timeout).output.replace("\r", "")
    assert not re.search(r"^(usertrap|panic): ", out, re.M), out[-2000:]
    m = re.search(r"^\[smolprobe\] logits=(.*)$", out, re.M)
    logits = np.array([float(v) for v in m.group(1).split(",")]) if m else None
    rest = out[:m.start()] + out[m.end():] if m else out
    return Probe(out, parse_smolprobe(rest), logits)


def image_files(build_dir: Path) -> list[str]:
    """The user programs of the build's image, as mkfs arguments (image.list)."""
    return (build_dir / "image.list").read_text().split()


def default_model(build_dir: Path) -> Path:
    """The checkpoint the build put on fs-llm.img as /model.bin."""
    listed = build_dir / "model.list"
    if listed.is_file():
        return Path(listed.read_text().strip())
    model = makefile_default_model(REPO)
    assert model is not None, "the Makefile names no DEFAULT_MODEL"
    return model


def session(cfg: BuildConfig, build_dir: Path, image: Path | None = None) -> QemuSession:
    if image is None:
        return QemuSession.for_config(cfg, REPO, llm=True).start()
    return QemuSession(build_dir / "kernel", image, cfg).start()


# ------------------------------------------------------------------------ the build's image

@pytest.fixture(scope="module")
def lazy_dir(build_kernel) -> Path:
    return build_kernel(LAZY, llm=True)


@pytest.fixture(scope="module")
def lazy_llm(lazy_dir):
    s = session(LAZY, lazy_dir)
    yield s
    s.close()


def test_default_run_lazy(lazy_llm, lazy_dir, reference_generate):
    model = default_model(lazy_dir)
    shape = KvShape.from_checkpoint(model)
    p = probe(lazy_llm, DEFAULT_ARGS + " --print-tokens")
    assert p.res.ok and p.res.request is not None
    assert (p.res.request.prompt_tokens, p.res.request.gen_tokens) == (3, 10)
    check_accounting(p.res, shape, 13, lazy=True)
    # the seed run's figures (docs/smolprobe.md, "The seed run")
    assert (max_kv_pages(shape), active_pages_est(shape, 13)) == (2880, 180)
    assert p.res.decode.mapped_pages == p.res.decode.active_pages_est == 180
    assert p.res.summary.saved_percent == 93 and p.res.verdict == "LAZY_STYLE"
    # numerics: the default model's tokens equal the reference's (integer Q8_0/Q4_1 path)
    assert p.res.tokens is not None
    assert list(p.res.tokens) == reference_generate(model, [1, 2, 3], 10).tokens


@pytest.mark.parametrize("prompt", REAL_PROMPTS)
def test_real_model_tokens_and_logits_equal_the_integer_reference(lazy_llm, lazy_dir, prompt,
                                                                  reference_generate):
    """The default (real SmolLM2) model in the guest, greedy, 20 tokens: tokens and all
    49152 final logits equal the reference's integer arithmetic bit for bit."""
    model = default_model(lazy_dir)
    ref = reference_generate(model, prompt, 20, arith="int")
    p = probe(lazy_llm, f"--prompt-tokens {','.join(map(str, prompt))} --gen-len 20 "
                        "--print-tokens --print-logits")
    assert p.res.ok, p.output[-2000:]
    assert list(p.res.tokens or ()) == ref.tokens
    assert printed_logits(p) == printed(ref.final_logits)


@pytest.mark.parametrize("prog, prompt, gen, seq_len", [
    ("smol_probe", [7], 1, 16),          # the alias; regions of exactly 3 pages
    ("smolprobe", [4, 5, 6, 7, 8], 3, 100),  # regions not page-aligned
    ("smolprobe", [1, 2], 1, 4),         # regions smaller than a page share pages
])
def test_other_lengths_lazy(lazy_llm, lazy_dir, prog, prompt, gen, seq_len):
    shape = KvShape.from_checkpoint(default_model(lazy_dir), seq_len)
    args = (f"--prompt-tokens {','.join(map(str, prompt))} --gen-len {gen} "
            f"--seq-len {seq_len}")
    p = probe(lazy_llm, args, prog=prog)
    assert p.res.ok, p.output
    check_accounting(p.res, shape, len(prompt) + gen, lazy=True)


def test_no_mmap_reads_the_model_and_generates_the_same(lazy_llm, lazy_dir):
    """--no-mmap: the prepared model is read into the heap instead of mapped
    (docs/smolprobe.md, "The weights: mapped or read"); the same greedy request generates
    the same tokens and text, and maps the same KV pages."""
    model = default_model(lazy_dir)
    args = '--prompt "The capital of France is" --gen-len 6 --print-tokens'
    mapped, read = (probe(lazy_llm, args + extra) for extra in ("", " --no-mmap"))
    for p, source in ((mapped, "mapped"), (read, "read")):
        assert p.res.ok and p.res.weights is not None, p.output[-2000:]
        assert p.res.weights.source == source, p.output[-2000:]
        assert p.res.model is not None and p.res.model.version == 3
        assert p.res.timing is not None and p.res.timing.first_token_ms > 0
        assert p.res.prompt is not None and p.res.tokens is not None
        shape = KvShape.from_checkpoint(model)
        check_accounting(p.res, shape, len(p.res.prompt) + len(p.res.tokens), lazy=True)
    assert mapped.res.weights.file_pages > 0 and read.res.weights.file_pages == 0
    assert read.res.prompt == mapped.res.prompt
    assert read.res.tokens == mapped.res.tokens and len(read.res.tokens) == 6
    assert read.res.text == mapped.res.text and read.res.text


def test_default_run_eager(build_kernel):
    d = build_kernel(EAGER, llm=True)
    shape = KvShape.from_checkpoint(default_model(d))
    s = session(EAGER, d)
    try:
        p = probe(s, DEFAULT_ARGS)
    finally:
        s.close()
    check_accounting(p.res, shape, 13, lazy=False)
    assert p.res.reserve.mapped_pages == 2880 and p.res.verdict == "EAGER_STYLE"


# ------------------------------------------------------------------------ the test image

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 192,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 320, "max_position_embeddings": 64, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}


def hf_tensors(seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights of HF_CONFIG under the real Hugging Face tensor names."""
    c, rng = HF_CONFIG, np.random.default_rng(seed)
    d, h, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]

    def mat(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        return (gain * rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm() -> np.ndarray:
        return rng.uniform(0.5, 1.5, d).astype(np.float32)

    t = {"model.embed_tokens.weight": mat(v, d, 0.4), "model.norm.weight": norm(),
         "lm_head.weight": mat(v, d, 2.0)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": norm(),
                  p + "post_attention_layernorm.weight": norm(),
                  p + "self_attn.q_proj.weight": mat(d, d, 3.0),
                  p + "self_attn.k_proj.weight": mat(kv, d, 3.0),
                  p + "self_attn.v_proj.weight": mat(kv, d),
                  p + "self_attn.o_proj.weight": mat(d, d),
                  p + "mlp.gate_proj.weight": mat(h, d),
                  p + "mlp.up_proj.weight": mat(h, d),
                  p + "mlp.down_proj.weight": mat(d, h)})
    return t


def checkpoint_of_hf(t: dict[str, np.ndarray]) -> Checkpoint:
    """A float32 Checkpoint made directly from the Hugging Face tensors (no file, no
    importer): the reference then runs on the original weights."""
    c = HF_CONFIG
    cfg = ModelConfig(dim=c["hidden_size"], hidden_dim=c["intermediate_size"],
                      n_layers=c["num_hidden_layers"], n_heads=c["num_attention_heads"],
                      n_kv_heads=c["num_key_value_heads"], vocab_size=c["vocab_size"],
                      max_seq_len=c["max_position_embeddings"], weight_type=0,
                      tied_embeddings=False, rope_theta=c["rope_theta"],
                      norm_eps=c["rms_norm_eps"])
    names = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_down": "mlp.down_proj",
             "w_up": "mlp.up_proj"}
    layer = range(cfg.n_layers)
    return Checkpoint(
        cfg,
        rms_att=np.stack([t[f"model.layers.{i}.input_layernorm.weight"] for i in layer]),
        rms_ffn=np.stack([t[f"model.layers.{i}.post_attention_layernorm.weight"]
                          for i in layer]),
        rms_final=t["model.norm.weight"], tok_embedding=t["model.embed_tokens.weight"],
        layers={k: [t[f"model.layers.{i}.{v}.weight"] for i in layer]
                for k, v in names.items()},
        classifier=t["lm_head.weight"])


@dataclass
class Assets:
    """The files on the test image (guest path -> host path) and the HF reference model."""

    files: dict[str, Path]
    hf_original: Checkpoint


@pytest.fixture(scope="module")
def assets(tmp_path_factory, lazy_dir) -> tuple[Assets, Path]:
    """Checkpoints and broken files, and an image holding them next to the programs."""
    d = tmp_path_factory.mktemp("smolprobe-image")
    files: dict[str, Path] = {}
    for name, preset, wt, tied, layers in (
            ("tiny-f32", "tiny", "f32", None, None), ("small-f32", "small", "f32", None, None),
            ("untied-f32", "small", "f32", False, None),
            ("small-int8", "small", "int8", None, None),
            ("smol2-f32", "smollm-135m", "f32", None, 2)):
        files[name] = d / f"{name}.bin"
        synthesize(files[name], preset, seed=11, weight_type=wt, n_layers=layers, tied=tied)
    raw = files["tiny-f32"].read_bytes()
    files["trunc"] = d / "trunc.bin"
    files["trunc"].write_bytes(raw[: len(raw) - 4096])
    files["magic"] = d / "magic.bin"
    files["magic"].write_bytes(b"NEXOSLX\0" + raw[8:])
    files.update(write_q_checkpoints(d))     # q41, mixed, gguf: version 2 block types
    t = hf_tensors(5)
    save_file(t, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(HF_CONFIG))
    files["hf"] = d / "hf.bin"
    import_hf(d / "config.json", d / "model.safetensors", files["hf"], weight_type="f32")

    image = d / "fs.img"
    mib = sum(f.stat().st_size for f in files.values()) // (1 << 20) + 128
    mk = subprocess.run([str(REPO / "build/host/mkfs"), str(image), str(mib),
                         *image_files(lazy_dir), *(f"{k}.bin={v}" for k, v in files.items())],
                        cwd=REPO, capture_output=True, text=True)  # image.list: repo paths
    assert mk.returncode == 0, f"mkfs failed: {mk.stderr}"
    return Assets(files, checkpoint_of_hf(t)), image


@pytest.fixture(scope="module")
def test_image(assets, lazy_dir):
    s = session(LAZY, lazy_dir, assets[1])
    yield s
    s.close()


@pytest.mark.parametrize("name, prompt, gen, temp, seed, logits", [
    ("tiny-f32", [1, 2, 3], 10, 0.0, 0, True),
    ("small-f32", [5, 9], 12, 0.0, 0, True),
    ("untied-f32", [1, 2, 3], 10, 0.0, 0, True),
    ("small-f32", [3], 16, 0.8, 42, True),      # seeded temperature sampling
    ("small-int8", [1, 2, 3], 10, 0.9, 7, True),
    # SmolLM-135M geometry (dim 576, 9/3 heads, vocab 49152) with 2 of its 30 layers: the
    # 30-layer float32 file (~540 MB) does not fit a 512 MiB guest; ~5 s a position
    ("smol2-f32", [1, 2, 3], 6, 0.0, 0, True),
])
def test_tokens_match_reference(assets, test_image, name, prompt, gen, temp, seed, logits):
    files = assets[0].files
    ref = generate(files[name], prompt, gen, temperature=temp, seed=seed)
    args = (f"--model /{name}.bin --prompt-tokens {','.join(map(str, prompt))} "
            f"--gen-len {gen} --temperature {temp} --seed {seed} --print-tokens"
            + (" --print-logits" if logits else ""))
    p = probe(test_image, args)
    assert p.res.ok, p.output[-2000:]
    assert list(p.res.tokens or ()) == ref.tokens
    if logits:
        assert p.logits is not None and p.logits.shape == ref.final_logits.shape
        assert np.abs(p.logits - ref.final_logits).max() <= 1e-3
    seq_len = min(256, load_checkpoint(files[name]).config.max_seq_len)  # the default
    check_accounting(p.res, KvShape.from_checkpoint(files[name], seq_len), len(prompt) + gen,
                     lazy=True)


def printed_logits(p: Probe) -> list[str]:
    """The logits line as smolprobe printed it (its text pins down each float32 value)."""
    m = re.search(r"^\[smolprobe\] logits=(.*)$", p.output, re.M)
    assert m, p.output[-2000:]
    return m.group(1).split(",")


@pytest.mark.parametrize("name", ["q41", "mixed", "gguf"])
@pytest.mark.parametrize("prompt, gen, temp, seed", Q_REQUESTS)
def test_q_tokens_and_logits_equal_the_integer_reference(assets, test_image, name, prompt,
                                                         gen, temp, seed):
    """Q8_0/Q4_1 (and mixed-type) checkpoints in the guest: tokens and final logits equal,
    bit for bit, the reference's integer arithmetic (docs/checkpoint.md)."""
    files = assets[0].files
    ref = generate(files[name], prompt, gen, temperature=temp, seed=seed, arith="int")
    p = probe(test_image, f"--model /{name}.bin --prompt-tokens {','.join(map(str, prompt))} "
                          f"--gen-len {gen} --temperature {temp} --seed {seed} "
                          "--print-tokens --print-logits")
    assert p.res.ok, p.output[-2000:]
    assert list(p.res.tokens or ()) == ref.tokens
    assert printed_logits(p) == printed(ref.final_logits)


def test_importer_round_trip(assets, test_image):
    """safetensors (HF names) -> import_hf -> smolprobe == reference on the original
    weights (a Checkpoint built straight from the safetensors arrays)."""
    a = assets[0]
    ref = generate(a.hf_original, [2, 3, 5, 7], 12)
    p = probe(test_image, "--model /hf.bin --prompt-tokens 2,3,5,7 --gen-len 12 "
                          "--print-tokens --print-logits")
    assert list(p.res.tokens or ()) == ref.tokens
    assert p.logits is not None and np.abs(p.logits - ref.final_logits).max() <= 1e-3


def _free_pages(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"^freecheck free_pages=(\d+)", text, re.M)]


def test_bad_input(assets, test_image):
    """Each bad request: one error line, no fault, no panic, no page leak."""
    cfg = load_checkpoint(assets[0].files["tiny-f32"]).config
    vocab, seq = cfg.vocab_size, min(256, cfg.max_seq_len)  # seq: smolprobe's default
    tiny = "--model /tiny-f32.bin"
    cases = [
        ("--model /nope --prompt-tokens 1 --gen-len 1", "cannot open"),
        ("--model /trunc.bin --prompt-tokens 1 --gen-len 1", "truncated"),
        ("--model /magic.bin --prompt-tokens 1 --gen-len 1", "magic"),
        (f"{tiny} --prompt-tokens 1,{vocab} --gen-len 1", "vocabulary"),
        (f"{tiny} --prompt-tokens 1,2 --gen-len {seq - 1}", "exceeds"),
        (f"{tiny} --seq-len 8 --prompt-tokens 1,2,3 --gen-len 6", "exceeds"),
        (f"{tiny} --prompt-tokens 1 --gen-len -1", "--gen-len"),
        (f"{tiny} --prompt-tokens 1,x,3 --gen-len 1", "--prompt-tokens"),
        (f"{tiny} --prompt-tokens 1,,3 --gen-len 1", "--prompt-tokens"),
    ]
    test_image.run("freecheck")  # warm up: the first exec may fill caches
    for args, what in cases:
        out = test_image.run(f"freecheck; smolprobe {args}; freecheck").output
        out = out.replace("\r", "")
        errors = re.findall(r"^\[smolprobe\] error: (.*)$", out, re.M)
        assert len(errors) == 1 and what in errors[0], (args, out)
        assert not re.search(r"^(usertrap|panic): ", out, re.M), (args, out)
        assert "SUMMARY" not in out
        free = _free_pages(out)
        assert len(free) == 2 and free[0] == free[1], (args, out)
