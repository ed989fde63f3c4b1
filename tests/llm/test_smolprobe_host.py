"""smolprobe on the host: numerics against the numpy reference, page accounting, errors.

user/smolprobe/ and the model library (user/llm/llm.c, the tokenizer) are compiled unchanged
with the host gcc against user/host/shim.c, a Linux stand-in for the NexOS user ABI whose
sbrk arena is lazily populated and whose memstat() counts resident arena pages (mincore),
so the page accounting behaves like LAZY_ALLOC=1.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from nexos.machine.limits import PAGE_SIZE as PAGE
from nexos.model import Transformer, generate, load_checkpoint
from nexos.model.format import layout, read_header
from nexos.model.synth import synthesize
from support import patched_copy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host gcc")


@pytest.fixture(scope="session")
def host_bin(host_programs: Path) -> Path:
    """The host build's folder (smolprobe and mathcheck)."""
    return host_programs


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Synthetic checkpoints: tiny/small in f32 and int8, and a 4-layer untied small."""
    d = tmp_path_factory.mktemp("ckpt")
    out = {}
    for preset in ("tiny", "small"):
        for wt in ("f32", "int8"):
            out[f"{preset}-{wt}"] = d / f"{preset}-{wt}.bin"
            synthesize(out[f"{preset}-{wt}"], preset=preset, seed=3, weight_type=wt)
    out["small-untied-int8"] = d / "small-untied.bin"
    synthesize(out["small-untied-int8"], preset="small", seed=5, weight_type="int8", tied=False)
    return out


@dataclass
class Run:
    code: int
    lines: list[str]
    stderr: str

    def field(self, prefix: str) -> str:
        for line in self.lines:
            if line.startswith(prefix):
                return line[len(prefix):]
        raise AssertionError(f"no line {prefix!r} in {self.lines}")

    def kv(self, prefix: str) -> dict[str, str]:
        """key=value pairs of the line starting with prefix."""
        return dict(w.split("=", 1) for w in self.field(prefix).split() if "=" in w)


def smolprobe(host_bin: Path, *args: str) -> Run:
    p = subprocess.run([str(host_bin / "smolprobe"), *args], capture_output=True, text=True,
                       timeout=120)
    return Run(p.returncode, p.stdout.splitlines(), p.stderr)


def request(model: Path, prompt: list[int], gen: int, *extra: str) -> list[str]:
    return ["--model", str(model), "--prompt-tokens", ",".join(map(str, prompt)),
            "--gen-len", str(gen), *extra]


REQUESTS = [([1, 2, 3], 10, 0.0, 0), ([5], 20, 0.0, 0), ([7, 8, 9, 10], 12, 0.8, 42),
            ([3, 1], 15, 1.0, 7)]


@pytest.mark.parametrize("name", ["tiny-f32", "tiny-int8", "small-f32", "small-int8",
                                  "small-untied-int8"])
@pytest.mark.parametrize("prompt,gen,temp,seed", REQUESTS)
def test_tokens_equal_reference(host_bin, ckpts, name, prompt, gen, temp, seed):
    run = smolprobe(host_bin, *request(ckpts[name], prompt, gen, "--print-tokens",
                                       "--temperature", str(temp), "--seed", str(seed)))
    assert run.code == 0, run.stderr
    got = [int(t) for t in run.field("[smolprobe] tokens=").split(",")]
    ref = generate(ckpts[name], prompt, gen, temperature=temp, seed=seed)
    assert got == ref.tokens


@pytest.mark.parametrize("name", ["tiny-f32", "small-f32", "small-int8"])
def test_final_logits_match_reference(host_bin, ckpts, name):
    """The final logits are those of the last of the P+G fed positions."""
    prompt, gen = [4, 9, 2], 6
    run = smolprobe(host_bin, *request(ckpts[name], prompt, gen, "--print-tokens",
                                       "--print-logits"))
    assert run.code == 0, run.stderr
    tokens = [int(t) for t in run.field("[smolprobe] tokens=").split(",")]
    logits = np.array([float(v) for v in run.field("[smolprobe] logits=").split(",")])
    ck = load_checkpoint(ckpts[name])
    tf = Transformer(ck, min(256, ck.config.max_seq_len))
    for pos, tok in enumerate(prompt + tokens):
        ref = tf.forward(tok, pos)
    assert logits.shape == ref.shape
    assert np.abs(logits - ref).max() < 1e-3


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a, byte by byte (the model library's llm_fnv1a, user/llm/llm.c)."""
    h = 2166136261
    for b in data:
        h = (h ^ b) * 16777619 & 0xFFFFFFFF
    return h


@pytest.mark.parametrize("name", ["tiny-f32", "small-int8"])
def test_logits_hash_is_the_fnv1a_of_the_logits_bytes(host_bin, ckpts, name):
    """--print-logits-hash hashes the final logits' float32 bytes: those of the reference,
    which smolprobe's arithmetic equals bit for bit (the printed %.6f numbers are not those
    bytes, so they cannot be re-hashed). The line comes last, after the logits."""
    prompt, gen = [4, 9, 2], 6
    run = smolprobe(host_bin, *request(ckpts[name], prompt, gen, "--print-logits",
                                       "--print-logits-hash"))
    assert run.code == 0, run.stderr
    ref = generate(ckpts[name], prompt, gen).final_logits
    assert run.lines[-1] == (f"[smolprobe] logits_hash n={len(ref)} "
                             f"fnv={fnv1a(ref.astype('<f4').tobytes())}")
    assert run.lines[-2].startswith("[smolprobe] logits=")


@pytest.mark.parametrize("bad", ["inf", "nan"])
def test_nonfinite_logits_print_as_such(host_bin, ckpts, tmp_path, bad):
    """A non-finite logit prints as nan, inf or -inf (docs/smolprobe.md, "Output"), never as
    a number: a final-norm weight of inf makes the logits infinities of both signs, a nan
    one makes them nan, in smolprobe as in the reference."""
    data = bytearray(ckpts["tiny-f32"].read_bytes())
    norm = next(sec for sec in layout(read_header(ckpts["tiny-f32"])) if sec.name == "rms_final")
    struct.pack_into("<f", data, norm.offset, float(bad))
    model = tmp_path / f"rms-final-{bad}.bin"
    model.write_bytes(bytes(data))
    prompt = [4, 9, 2]
    run = smolprobe(host_bin, *request(model, prompt, 0, "--print-logits"))
    assert run.code == 0, run.stderr
    printed = run.field("[smolprobe] logits=").split(",")
    ck = load_checkpoint(model)
    tf = Transformer(ck, min(256, ck.config.max_seq_len))
    with np.errstate(all="ignore"):
        for pos, tok in enumerate(prompt):
            ref = tf.forward(tok, pos)
    assert len(printed) == len(ref) and not np.isfinite(ref).any()
    want = ["nan" if np.isnan(v) else "inf" if v > 0 else "-inf" for v in ref]
    assert printed == want
    if bad == "inf":
        assert {"inf", "-inf"} <= set(printed)


def expected_pages(n_layers: int, kv_dim: int, seq_len: int, rows: int) -> tuple[int, int, int]:
    """(max_kv_pages, active_pages_est, distinct pages written) from the geometry.

    active_pages_est sums, per (layer, K/V) region, the pages its rows [0, rows) span
    (docs/smolprobe.md, "What it does"); regions smaller than a page share pages, which the estimate
    counts once per region and the kernel maps once."""
    region = seq_len * kv_dim * 4
    total = 2 * n_layers * region
    active, touched = 0, set()
    for r in range(2 * n_layers):
        first, last = r * region // PAGE, (r * region + rows * kv_dim * 4 - 1) // PAGE
        active += last - first + 1
        touched.update(range(first, last + 1))
    return -(-total // PAGE), active, len(touched)


@pytest.mark.parametrize("name,prompt,gen,seq", [
    ("small-int8", [1, 2, 3], 10, None), ("small-int8", [1], 0, None),
    ("small-int8", list(range(20)), 60, 200), ("small-int8", [7] * 5, 251, 256),
    ("tiny-f32", [1, 2], 30, 64), ("tiny-int8", [3], 1, 1 + 1),
])
def test_page_accounting(host_bin, ckpts, name, prompt, gen, seq):
    extra = ["--trace"] + (["--seq-len", str(seq)] if seq else [])
    run = smolprobe(host_bin, *request(ckpts[name], prompt, gen, *extra))
    assert run.code == 0, run.stderr
    cfg = load_checkpoint(ckpts[name]).config
    seq_len = seq or min(256, cfg.max_seq_len)
    max_pages, active, touched = expected_pages(cfg.n_layers, cfg.kv_dim, seq_len,
                                                len(prompt) + gen)
    assert run.kv("[smolprobe] request") == {"prompt_tokens": str(len(prompt)),
                                               "gen_tokens": str(gen)}
    assert run.kv("[smolprobe] kv_capacity") == {"max_pages": str(max_pages),
                                                   "active_pages_est": str(active)}
    reserve = run.kv("[smolprobe] reserve_phase")
    assert reserve == {"virtual_pages": str(max_pages), "mapped_pages": "0",
                       "used_pages": "0"}
    decode = run.kv("[smolprobe] decode_phase")
    assert decode["mapped_pages"] == str(touched)  # the shim maps a page at its first touch
    assert decode["active_pages_est"] == str(active)
    saved = max_pages - touched
    assert run.kv("[smolprobe] SUMMARY") == {
        "max_kv_pages": str(max_pages), "actual_mapped_pages": str(touched),
        "saved_pages": str(saved), "saved_percent": f"{100 * saved // max_pages}%"}
    assert run.field("[smolprobe] verdict=").startswith("LAZY_STYLE ")
    trace = [ln for ln in run.lines if ln.startswith("[smolprobe] trace ")]
    assert len(trace) == len(prompt) + gen
    assert trace[-1].endswith(f"pos={len(prompt) + gen - 1} kv_mapped_pages={touched}")
    timing = run.kv("[smolprobe] timing")
    assert set(timing) == {"load_ms", "decode_ms", "tokens_per_s", "first_token_ms", "prefill_ms",
                           "prefill_tokens_per_s", "decode_tokens_per_s", "harts"}
    assert timing["harts"] == "1"


def test_output_order_and_default_seq_len(host_bin, ckpts):
    run = smolprobe(host_bin, *request(ckpts["small-int8"], [1, 2, 3], 10))
    assert run.code == 0
    heads = [ln.split()[1].split("=")[0] for ln in run.lines]
    assert heads == ["loading", "model", "weights", "request", "kv_capacity", "running", "SUMMARY",
                     "reserve_phase", "decode_phase", "verdict", "timing"]
    assert run.lines[1] == ("[smolprobe] model weights=int8 version=1 layers=4 dim=128 "
                            "vocab=512 tokenizer=0")


def test_errors(host_bin, ckpts, tmp_path):
    good = ckpts["tiny-int8"]
    raw = good.read_bytes()
    (tmp_path / "trunc.bin").write_bytes(raw[:-100])
    (tmp_path / "long.bin").write_bytes(raw + b"\0" * 4)
    (tmp_path / "short.bin").write_bytes(raw[:100])
    cases = {
        "missing": request(tmp_path / "nope.bin", [1], 1),
        "truncated": request(tmp_path / "trunc.bin", [1], 1),
        "extended": request(tmp_path / "long.bin", [1], 1),
        "header-short": request(tmp_path / "short.bin", [1], 1),
        "magic": request(patched_copy(good, tmp_path / "m.bin", 0, b"XEXOSLM\0"), [1], 1),
        "version": request(patched_copy(good, tmp_path / "v.bin", 8, b"\2\0\0\0"), [1], 1),
        "heads": request(patched_copy(good, tmp_path / "h.bin", 24, b"\5\0\0\0"), [1], 1),
        "wtype": request(patched_copy(good, tmp_path / "w.bin", 40, b"\7\0\0\0"), [1], 1),
        "token>=vocab": request(good, [1, 256], 1),
        "negative-token": request(good, [1, -2], 1),
        "junk-token": request(good, [1], 1)[:3] + ["1,x,3"] + ["--gen-len", "1"],
        "empty-prompt": ["--model", str(good), "--prompt-tokens", "", "--gen-len", "1"],
        "trailing-comma": ["--model", str(good), "--prompt-tokens", "1,", "--gen-len", "1"],
        "too-long": request(good, [1, 2, 3], 126),
        "seq>max": request(good, [1], 1, "--seq-len", "129"),
        "seq0": request(good, [1], 1, "--seq-len", "0"),
        "gen-1": request(good, [1], 1)[:4] + ["--gen-len", "-1"],
        "gen-junk": request(good, [1], 1)[:4] + ["--gen-len", "ten"],
        "no-gen": request(good, [1], 1)[:4],
        "bad-flag": request(good, [1], 1, "--frobnicate"),
        "missing-value": request(good, [1], 1, "--seed"),
        "bad-temp": request(good, [1], 1, "--temperature", "-1"),
        "samples0": request(good, [1], 1, "--samples", "0"),
        "samples-too-many": request(good, [1], 1, "--samples", "65"),
        "samples-greedy": request(good, [1], 1, "--samples", "2", "--temperature", "0"),
        "samples-gen0": request(good, [1], 0, "--samples", "2"),
    }
    for what, args in cases.items():
        run = smolprobe(host_bin, *args)
        assert run.code == 1, (what, run.code, run.stderr)
        assert run.stderr.startswith("[smolprobe] error: "), (what, run.stderr)
        assert len(run.stderr.splitlines()) == 1, what
        assert not any("SUMMARY" in ln for ln in run.lines), what
    ok = smolprobe(host_bin, *request(good, [1, 2, 3], 125))  # exactly seq_len = 128
    assert ok.code == 0, ok.stderr


@pytest.mark.parametrize("name,n,temp", [("small-int8", 3, None), ("tiny-f32", 2, "1.0")])
def test_samples_branch_tokens_equal_reference(host_bin, ckpts, name, n, temp):
    """--samples: branch i samples with seed+i (temperature 0.8 unless given) from the
    parent's prefill; its tokens are the reference's for that seed. (The host shim has no
    COW counters; tests/llm/test_parallel.py checks those in the kernel.)"""
    prompt, gen, seed = [4, 5, 6, 7], 6, 11
    extra = ["--samples", str(n), "--seed", str(seed)] + (["--temperature", temp] if temp else [])
    run = smolprobe(host_bin, *request(ckpts[name], prompt, gen, *extra))
    assert run.code == 0, run.stderr
    assert run.kv("[smolprobe] fork_phase ")["branches"] == str(n)
    branches = [ln for ln in run.lines if ln.startswith("[smolprobe] branch ")]
    assert [ln.split()[2] for ln in branches] == [str(i) for i in range(n)]
    for i, ln in enumerate(branches):
        got = [int(t) for t in ln.split("tokens=")[1].split()[0].split(",")]
        ref = generate(ckpts[name], prompt, gen, temperature=float(temp or 0.8), seed=seed + i)
        assert got == ref.tokens, (i, got, ref.tokens)
    assert run.kv("[smolprobe] PARALLEL_SUMMARY ")["branches"] == str(n)


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_samples_killed_branch_is_reported(host_bin, ckpts, victim):
    """A branch that dies before reporting (the hidden --test-kill-branch hook kills it
    after its pre-touch, as the kernel kills a branch out of memory in a fault) does not
    hang the parent: it prints `branch i killed`, the other branches report tokens equal
    to the reference, and smolprobe exits 0."""
    prompt, gen, seed, n = [4, 5, 6], 4, 7, 3
    run = smolprobe(host_bin, *request(ckpts["small-int8"], prompt, gen, "--samples", str(n),
                                       "--seed", str(seed), "--test-kill-branch", str(victim)))
    assert run.code == 0, run.stderr
    killed = [ln for ln in run.lines if " killed " in ln]
    assert killed == [f"[smolprobe] branch {victim} killed before reporting (exit status -1); "
                      "its pages went back to the kernel"], run.lines
    branches = [ln for ln in run.lines if ln.startswith("[smolprobe] branch ") and "tokens=" in ln]
    alive = [i for i in range(n) if i != victim]
    assert [int(ln.split()[2]) for ln in branches] == alive
    for i, ln in zip(alive, branches):
        got = [int(t) for t in ln.split("tokens=")[1].split()[0].split(",")]
        assert got == generate(ckpts["small-int8"], prompt, gen, temperature=0.8,
                               seed=seed + i).tokens, i
    assert run.kv("[smolprobe] PARALLEL_SUMMARY ")["branches"] == str(n - 1)
    assert run.kv("[smolprobe] fork_phase ")["branches"] == str(n)
    # the killed branch's line stands in its place, right after fork_phase with the others
    ordered = [ln for ln in run.lines if ln.startswith("[smolprobe] branch ")]
    assert [int(ln.split()[2]) for ln in ordered] == list(range(n))
    first = run.lines.index(ordered[0])
    assert run.lines[first - 1].startswith("[smolprobe] fork_phase ")
    assert run.lines[first:first + n] == ordered


def test_samples_limit_is_six(host_bin, ckpts):
    """Six branches fit the 16 descriptors of a NexOS process; seven is a clear error."""
    ok = smolprobe(host_bin, *request(ckpts["tiny-int8"], [1, 2], 2, "--samples", "6"))
    assert ok.code == 0, ok.stderr
    assert ok.kv("[smolprobe] PARALLEL_SUMMARY ")["branches"] == "6"
    bad = smolprobe(host_bin, *request(ckpts["tiny-int8"], [1, 2], 2, "--samples", "7"))
    assert bad.code == 1 and "out of range [1, 6]" in bad.stderr


def test_bench_line(host_bin, ckpts):
    """--bench alone prints the peak and matvec int8 MAC rates and their ratio; the
    ratio is the floor of 100 x matvec / peak, peak the better of the two kernels."""
    run = smolprobe(host_bin, "--bench", "--model", str(ckpts["small-int8"]))
    assert run.code == 0, run.stderr
    b = {k: int(v.rstrip("%")) for k, v in run.kv("[smolprobe] bench ").items()}
    d = {k: int(v) for k, v in run.kv("[smolprobe] bench_detail ").items()}
    assert b["peak_int8_macs_per_s"] == max(d["peak_plain"], d["peak_packed"]) > 0
    assert b["matvec_int8_macs_per_s"] > 0
    assert b["ratio"] == b["matvec_int8_macs_per_s"] * 100 // b["peak_int8_macs_per_s"]
    assert not any("SUMMARY" in ln for ln in run.lines)
    f32 = smolprobe(host_bin, "--bench", "--model", str(ckpts["small-f32"]))
    assert f32.code == 1 and "float32" in f32.stderr


def test_bench_after_request_keeps_the_request_output(host_bin, ckpts):
    """--bench with a request: the request's lines and tokens as without it, then bench."""
    args = request(ckpts["small-int8"], [1, 2, 3], 5, "--print-tokens")
    plain, bench = smolprobe(host_bin, *args), smolprobe(host_bin, *args, "--bench")
    assert bench.code == 0, bench.stderr
    assert bench.field("[smolprobe] tokens=") == plain.field("[smolprobe] tokens=")
    assert bench.lines[-2].startswith("[smolprobe] bench ")
    assert bench.lines[-1].startswith("[smolprobe] bench_detail ")


def test_help_says_which_weights(host_bin):
    run = smolprobe(host_bin, "--help")
    assert run.code == 0
    text = "\n".join(run.lines)
    assert "SmolLM2-135M-Instruct" in text and "SYNTHETIC" in text and "MODEL=synth" in text
    assert "--prompt-tokens" in text and "--chat" in text and "--print-logits-hash" in text
    assert "--no-mmap" in text


def test_umath_within_one_ulp(host_bin):
    p = subprocess.run([str(host_bin / "mathcheck")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout
