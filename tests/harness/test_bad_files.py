"""Every `nexos` command that reads a file the user names turns any malformed input into one
line `nexos: error: <file>[:<line>]: <why>` on stderr and exit status 1, never a traceback.

Each command gets its valid file (made here: a tiny synthetic checkpoint from `nexos model
synth`, a small llama GGUF with a tokenizer from gguf.GGUFWriter, a Hugging Face config and
safetensors pair, a smolserve workload, a hidden test program, a marked kernel source) and
then the bad ones: missing, a folder, empty, cut at several points, another format (PNG,
JSON, the GGUF where a checkpoint is expected and the other way round) and seeded random
bytes. The valid files are shown to be accepted first, so a refusal is the file's fault.
Commands run in-process through click's CliRunner (an uncaught exception would show as
`result.exception`), and a few through the real console script. No QEMU is booted: the
files are refused before anything is built.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner, Result
from safetensors.numpy import save_file

import nexos.clikit
import nexos.course.cli
import nexos.machine.cli
import nexos.programs.cli
from nexos.cli import cli
from nexos.course.cli import check_hidden_file
from nexos.machine.build import host_program
from nexos.machine.config import ConfigError
from nexos.model.tokenizer import byte_to_unicode
from nexos.programs.serve import check_workload
from support import HF_CONFIG, REPO, hf_weights

PNG = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0\x1f\xf3\xffa"
JSON = b'{"name": "not a model", "layers": [1, 2, 3]}\n'
SEED = 20240601


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused file stops its command before any build or boot: should one get that far,
    these fail the test (as the command's exception) instead of starting make or QEMU."""
    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command went on to build or boot")
    for module in (nexos.clikit, nexos.machine.cli, nexos.programs.cli, nexos.course.cli):
        for name in ("prepare", "find_toolchain", "grade_all", "run_serves"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, reached)


# ------------------------------------------------------------------ the valid files

@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One valid file of each kind the commands read."""
    d = tmp_path_factory.mktemp("valid")
    r = CliRunner().invoke(cli, ["model", "synth", "--preset", "tiny", "--out",
                                 str(d / "tiny.bin")])
    assert r.exit_code == 0, r.output
    write_small_gguf(d / "small.gguf")
    (d / "config.json").write_text(json.dumps(HF_CONFIG))
    save_file(hf_weights(0, True), str(d / "model.safetensors"))
    (d / "work.txt").write_text("# a comment\nA 96 5,6,7 gen=2\n\nB\t64 1,2 eos\n")
    (d / "hidden.c").write_text('#include "kernel/types.h"\n#include "user/user.h"\n\n'
                                "int\nmain(void)\n{\n  printf(\"ALL TESTS PASSED\\n\");\n"
                                "  exit(0);\n}\n")
    return {"checkpoint": d / "tiny.bin", "gguf": d / "small.gguf",
            "config": d / "config.json", "weights": d / "model.safetensors",
            "workload": d / "work.txt", "hidden": d / "hidden.c"}


def write_small_gguf(path: Path) -> None:
    """A llama GGUF small enough to cut anywhere: float32 tensors of a 1-layer model and a
    byte-level BPE tokenizer (the 256 byte tokens, two merges, one control token) with the
    `smollm` pre-tokenizer, so `nexos model import --gguf` embeds a tokenizer from it."""
    dim, hidden, heads, kv_heads, ctx = 32, 64, 2, 1, 64
    b2u = byte_to_unicode()
    tokens = [b2u[b] for b in range(256)] + ["ab", "abc", "<|endoftext|>"]
    types = [1] * 258 + [3]
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("bad-files-test")
    for add, value in ((w.add_block_count, 1), (w.add_context_length, ctx),
                       (w.add_embedding_length, dim), (w.add_feed_forward_length, hidden),
                       (w.add_head_count, heads), (w.add_head_count_kv, kv_heads),
                       (w.add_rope_dimension_count, dim // heads),
                       (w.add_vocab_size, len(tokens))):
        add(value)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b", "ab c"])
    w.add_bos_token_id(258)
    w.add_eos_token_id(258)
    kv = kv_heads * dim // heads
    shapes = {"token_embd.weight": (len(tokens), dim), "output_norm.weight": (dim,),
              "blk.0.attn_norm.weight": (dim,), "blk.0.ffn_norm.weight": (dim,),
              "blk.0.attn_q.weight": (dim, dim), "blk.0.attn_k.weight": (kv, dim),
              "blk.0.attn_v.weight": (kv, dim), "blk.0.attn_output.weight": (dim, dim),
              "blk.0.ffn_gate.weight": (hidden, dim), "blk.0.ffn_down.weight": (dim, hidden),
              "blk.0.ffn_up.weight": (hidden, dim)}
    for name, shape in shapes.items():
        w.add_tensor(name, (0.1 * rng.standard_normal(shape)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------ the bad files

def bad_contents(valid: bytes, cuts: list[int], other: bytes, text: bool
                 ) -> dict[str, bytes]:
    """Name -> bytes of every bad variant of a valid file: empty, `valid` cut at each of
    `cuts` (a binary file also in the middle and one byte short; a text file is cut only
    where the test says, since a text file cut at a line's end is still valid), PNG, JSON,
    `other` (a file of another format) and seeded random bytes."""
    out = {"empty": b"", "png": PNG, "json": JSON, "other-format": other,
           "random": random.Random(SEED).randbytes(3000)}
    for n in cuts if text else [*cuts, len(valid) // 2, len(valid) - 1]:
        assert 0 < n < len(valid)
        out[f"cut-{n}"] = valid[:n]
    return out


def write_variants(d: Path, contents: dict[str, bytes], suffix: str) -> dict[str, Path]:
    """Each variant as a file `d/<name><suffix>`, plus a missing file and a folder."""
    d.mkdir(parents=True, exist_ok=True)
    paths = {"missing": d / f"missing{suffix}", "folder": d / f"folder{suffix}"}
    paths["folder"].mkdir()
    for name, data in contents.items():
        paths[name] = d / f"{name}{suffix}"
        paths[name].write_bytes(data)
    return paths


def assert_one_line_error(r: Result, names: str) -> str:
    """A refused file: exit status 1, no exception escaped, no traceback, and the last
    stderr line is `nexos: error: <names>...`. Returns that line."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 1, (r.exit_code, r.output)
    assert "Traceback" not in r.output + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines, r.output
    assert lines[-1].startswith(f"nexos: error: {names}"), lines[-1]
    return lines[-1]


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


# Each command that reads a user's file: (kind of file, its suffix, the argv for a file,
# the valid files). Every variant of that kind's valid file must be refused.
Argv = Callable[[Path, dict[str, Path], Path], list[str]]
COMMANDS: dict[str, tuple[str, str, Argv]] = {
    "model import --gguf": ("gguf", ".gguf", lambda f, v, o: [
        "model", "import", "--gguf", str(f), "--out", str(o / "out.bin")]),
    "model info": ("checkpoint", ".bin", lambda f, v, o: ["model", "info", str(f)]),
    "model prepare": ("checkpoint", ".bin", lambda f, v, o: [
        "model", "prepare", str(f), "--out", str(o / "out.bin")]),
    "model ref": ("checkpoint", ".bin", lambda f, v, o: [
        "model", "ref", str(f), "--prompt-tokens", "1,2", "--gen-len", "1"]),
    "model import --config": ("config", ".json", lambda f, v, o: [
        "model", "import", "--config", str(f), "--weights", str(v["weights"]), "--out",
        str(o / "out.bin")]),
    "model import --weights": ("weights", ".safetensors", lambda f, v, o: [
        "model", "import", "--config", str(v["config"]), "--weights", str(f), "--out",
        str(o / "out.bin")]),
    "serve --workload": ("workload", ".txt", lambda f, v, o: [
        "serve", "--no-build", "--workload", str(f)]),
    "grade --hidden": ("hidden", ".c", lambda f, v, o: [
        "grade", "--no-build", "--configs", "lazy1-cow1", "--hidden", f"{f}:5"]),
}

# Where to cut each valid file: inside the magic, the header, the key/value and tensor
# tables (the GGUF), the safetensors header length; a text file inside a field (the
# workload: in line 2's max_len, prompt and end, in line 4's end; the hidden program
# before its main(); the config inside the JSON object).
CUTS = {"gguf": [3, 22, 24, 100, 500, 2000], "checkpoint": [5, 8, 100, 255, 300, 5000],
        "config": [1, 30, 100, 200], "weights": [4, 8, 9, 100, 1000],
        "workload": [15, 18, 26, 40], "hidden": [10, 40, 52]}
TEXT_KINDS = ("config", "workload", "hidden")
# the other format: where a file of one kind is expected, a valid file of another kind
OTHER = {"gguf": "checkpoint", "checkpoint": "gguf", "config": "weights",
         "weights": "gguf", "workload": "checkpoint", "hidden": "weights"}


def test_the_valid_files_are_accepted(files: dict[str, Path], tmp_path: Path) -> None:
    """The files the bad ones are cut from are good: a refusal below is the damage's."""
    r = invoke(["model", "info", str(files["checkpoint"]), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["n_layers"] == 2, r.output
    r = invoke(["model", "ref", str(files["checkpoint"]), "--prompt-tokens", "1,2",
                "--gen-len", "1", "--json"])
    assert r.exit_code == 0 and len(json.loads(r.stdout)["tokens"]) == 1, r.output
    r = invoke(["model", "prepare", str(files["checkpoint"]), "--out",
                str(tmp_path / "p.bin"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["config"]["prepared"], r.output
    r = invoke(["model", "import", "--gguf", str(files["gguf"]), "--out",
                str(tmp_path / "g.bin"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["tokenizer_size"] > 0, r.output
    r = invoke(["model", "import", "--config", str(files["config"]), "--weights",
                str(files["weights"]), "--out", str(tmp_path / "h.bin"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["config"]["n_layers"] == 2, r.output
    assert check_workload(files["workload"], host_program(REPO, "build/host/smolserve")) == [
        "A 96 5,6,7 gen=2", "B 64 1,2 eos"]
    check_hidden_file(f"{files['hidden']}:5")  # raises ConfigError when refused


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_bad_file_is_one_line(command: str, files: dict[str, Path],
                                    tmp_path: Path) -> None:
    kind, suffix, argv = COMMANDS[command]
    valid = files[kind].read_bytes()
    variants = write_variants(tmp_path / "bad", bad_contents(
        valid, CUTS[kind], files[OTHER[kind]].read_bytes(), kind in TEXT_KINDS), suffix)
    assert len(variants) >= 10
    refused = {}
    for name, path in variants.items():
        refused[name] = assert_one_line_error(invoke(argv(path, files, tmp_path)), str(path))
    assert not (tmp_path / "out.bin").exists()  # an import that failed left nothing
    # the messages say what is wrong, not just that something is
    assert "no such file" in refused["missing"].lower()
    assert "no such file" not in refused["png"].lower()


def test_a_gguf_cut_at_22_bytes_is_one_line_from_the_console_script(
        files: dict[str, Path], tmp_path: Path) -> None:
    """The real `nexos` program (not CliRunner) on a 22-byte truncated GGUF and on a GGUF
    given as a checkpoint: one stderr line each, exit status 1."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(files["gguf"].read_bytes()[:22])
    nexos = [sys.executable, "-m", "nexos"]
    for f, args, why in ((cut, ["model", "import", "--gguf", str(cut), "--out",
                                str(tmp_path / "x.bin")], "truncated GGUF header (22 bytes"),
                         (files["gguf"], ["model", "info", str(files["gguf"])],
                          "not a NexOS checkpoint")):
        p = subprocess.run([*nexos, *args], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 1 and p.stdout == "", (p.stdout, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith(f"nexos: error: {f}: ") and why in p.stderr


def test_a_damaged_tokenizer_in_a_sound_gguf_is_an_error(files: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """Token text that is not UTF-8 (the GGUF's structure intact) is a broken file, not a
    GGUF without a tokenizer: the import refuses it rather than dropping the tokenizer."""
    data = bytearray(files["gguf"].read_bytes())
    where = data.index(b"<|endoftext|>")
    data[where + 2] = 0xFF  # `<|` + an invalid UTF-8 byte
    bad = tmp_path / "tok.gguf"
    bad.write_bytes(bytes(data))
    line = assert_one_line_error(invoke(["model", "import", "--gguf", str(bad), "--out",
                                         str(tmp_path / "x.bin")]), str(bad))
    assert "tokenizer.ggml.tokens" in line and "UTF-8" in line
    assert not (tmp_path / "x.bin").exists()


def test_a_hidden_program_file_is_checked_before_any_build(files: dict[str, Path],
                                                           tmp_path: Path) -> None:
    """check_hidden_file is what `grade --hidden` runs first: wrong suffix and no main()
    are named too."""
    txt = tmp_path / "prog.txt"
    txt.write_text("int main(void) { return 0; }\n")
    line = assert_one_line_error(invoke(["grade", "--no-build", "--hidden", str(txt)]),
                                 str(txt))
    assert "not a .c file" in line
    nomain = tmp_path / "lib.c"
    nomain.write_text("int helper(void) { return 1; }\n")
    with pytest.raises(ConfigError, match=r"lib\.c: defines no main\(\)"):
        check_hidden_file(str(nomain))


# ------------------------------------------------------------------ the lab kit's markers

GOOD_REGION = """\
int
answer(int x)
{
  // LAB lazy: begin
  int y = x * 42;
  return y;
  // LAB lazy: stub
  // return -1;
  // LAB lazy: end
}
"""


def marked_checkout(root: Path, source: bytes) -> Path:
    """A tiny git checkout whose kernel/x.c is `source` (tracked, so the lab kit reads it)."""
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "x.c").write_bytes(source)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    return root


def test_a_sound_region_is_listed(tmp_path: Path) -> None:
    src = marked_checkout(tmp_path / "src", GOOD_REGION.encode())
    r = invoke(["lab", "regions", "--source", str(src)])
    assert r.exit_code == 0, r.output
    assert "kernel/x.c:4-9 answer()" in r.stdout and "1 regions, all markers sound" in r.stdout


BAD_MARKERS = {
    "malformed": (b"// LAB lazy begin\nint x;\n", 1, "malformed marker"),
    "unknown lab": (b"// LAB paging: begin\nx;\n// LAB paging: end\n", 1, "unknown lab"),
    "no end": (b"int a;\n// LAB cow: begin\nint x;\n", 2, "has no `end`"),
    "no begin": (b"int a;\n\n// LAB cow: end\n", 3, "without a `begin`"),
    "nested": (b"// LAB lazy: begin\n// LAB cow: begin\nx;\n// LAB cow: end\n"
               b"// LAB lazy: end\n", 2, "do not nest"),
    "mismatched": (b"// LAB lazy: begin\nx;\n// LAB cow: end\n", 3, "in the `LAB lazy`"),
    "cut after the solution": (GOOD_REGION.encode()[:GOOD_REGION.index("  // LAB lazy: stub")],
                               4, "has no `end`"),
    "cut inside the stub": (GOOD_REGION.encode()[:GOOD_REGION.index("// return")], 4,
                            "has no `end`"),
    "not UTF-8": (b"int a;\n// \xff\xfe\n", 2, "not UTF-8"),
    "png": (PNG, 1, "not UTF-8"),
    "random": (random.Random(SEED).randbytes(3000), None, "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_MARKERS))
@pytest.mark.parametrize("command", ["regions", "make"])
def test_bad_markers_are_file_and_line(case: str, command: str, tmp_path: Path) -> None:
    source, line, why = BAD_MARKERS[case]
    src = marked_checkout(tmp_path / "src", source)
    args = ["lab", "regions", "--source", str(src)] if command == "regions" else [
        "lab", "make", "--lab", "all", "--source", str(src), "--out", str(tmp_path / "out")]
    msg = assert_one_line_error(invoke(args), f"kernel/x.c:{line}: " if line else
                                "kernel/x.c:")
    assert why in msg
    assert not (tmp_path / "out").exists()
