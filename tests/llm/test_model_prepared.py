"""The prepared checkpoint (format version 3, docs/checkpoint.md "Version 3: prepared"):
`nexos model prepare` writes it from a version 1 or 2 file, and smolprobe's host build,
which maps it, gives the tokens and the bit-identical logits that it gives reading the
file it was made from: int8 and float32 (version 1), and the real SmolLM2's Q8_0/Q4_1
blocks with their tokenizer (version 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nexos.cli import cli
from nexos.model.format import (
    CheckpointError,
    checkpoint_size,
    derived_nbytes,
    layout,
    load_checkpoint,
    read_header,
)
from nexos.model.prepared import write_prepared
from nexos.model.synth import synthesize


def smolprobe(host_programs: Path, model: Path, *args: str) -> list[str]:
    """The lines of one host run, without `[smolprobe] `."""
    p = subprocess.run([str(host_programs / "smolprobe"), "--model", str(model), *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return [ln.removeprefix("[smolprobe] ") for ln in p.stdout.splitlines()]


def same_run(host_programs: Path, src: Path, prepared: Path, *args: str) -> None:
    """Read and mapped, the runs print the same lines (tokens, logits, every page count)
    but for the model's version, the weights line and the times; so does the prepared file
    read with --no-mmap."""
    read, mapped = (smolprobe(host_programs, m, *args) for m in (src, prepared))
    no_mmap = smolprobe(host_programs, prepared, *args, "--no-mmap")
    assert "weights source=read file_pages=0" in read
    assert "weights source=read file_pages=0" in no_mmap
    assert any(ln.startswith("weights source=mapped ") for ln in mapped)
    for run in (mapped, no_mmap):
        assert any("version=3" in ln for ln in run if ln.startswith("model "))

    def kept(lines: list[str]) -> list[str]:
        return [ln for ln in lines if ln.split(" ", 1)[0] not in ("model", "weights", "timing")
                and " decode_ms=" not in ln]
    assert kept(read) == kept(mapped) == kept(no_mmap) and len(kept(read)) > 8


@pytest.mark.parametrize("weight_type", ["int8", "f32"])
def test_version_1_prepared_runs_the_same(host_programs, tmp_path, weight_type):
    src = tmp_path / "small.bin"
    synthesize(src, "small", 0, weight_type)
    out = tmp_path / "small.v3.bin"
    cfg = write_prepared(src, out)
    assert cfg.prepared and cfg.version == 3 and read_header(out) == cfg
    assert out.stat().st_size == checkpoint_size(cfg)
    assert derived_nbytes(cfg) == 0   # no Q8_0/Q4_1 block: no derived section
    same_run(host_programs, src, out, "--prompt-tokens", "1,2,3", "--gen-len", "6",
             "--print-tokens", "--print-logits")
    # --samples: the branches sample the same tokens (the page figures differ, rightly: a
    # read model is anonymous memory the fork copies, a mapped one is the page cache's)
    branches = [[ln.split()[2] for ln in smolprobe(host_programs, m, "--prompt-tokens", "5,6",
                                                   "--gen-len", "4", "--samples", "2")
                 if ln.startswith("branch ")] for m in (src, out)]
    assert branches[0] == branches[1] and len(branches[0]) == 2


def test_real_model_prepared_runs_the_same(host_programs, smollm2_checkpoint, tmp_path):
    out = tmp_path / "smollm2.v3.bin"
    cfg = write_prepared(smollm2_checkpoint, out)
    src_cfg = read_header(smollm2_checkpoint)
    # the same tensors at the same offsets; the derived section and the tokenizer after
    assert [(s.name, s.offset, s.nbytes) for s in layout(cfg)] == [
        (s.name, s.offset, s.nbytes) for s in layout(src_cfg)]
    assert out.stat().st_size > smollm2_checkpoint.stat().st_size
    same_run(host_programs, smollm2_checkpoint, out, "--prompt", "The capital of France is",
             "--gen-len", "6", "--print-tokens", "--print-logits")
    same_run(host_programs, smollm2_checkpoint, out, "--chat", "Hi", "--gen-len", "3")


def test_prepare_cli_info_and_what_reads_version_3(tmp_path):
    src = tmp_path / "small.bin"
    synthesize(src, "small", 0, "int8")
    out = tmp_path / "p.bin"
    r = CliRunner().invoke(cli, ["model", "prepare", str(src), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["prepared"] is True
    r = CliRunner().invoke(cli, ["model", "info", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["file_size"] == out.stat().st_size
    # preparing a prepared file copies it
    again = tmp_path / "again.bin"
    assert CliRunner().invoke(cli, ["model", "prepare", str(out), "--out",
                                    str(again)]).exit_code == 0
    assert again.read_bytes() == out.read_bytes()
    # the Python reference reads versions 1 and 2 only, and says so in one line
    with pytest.raises(CheckpointError, match="version 3"):
        load_checkpoint(out)
    r = CliRunner().invoke(cli, ["model", "ref", str(out), "--prompt-tokens", "1,2",
                                 "--gen-len", "1"])
    assert r.exit_code == 1 and "version 3" in r.output and "Traceback" not in r.output
    # a version 3 file cut short is refused by its size
    cut = tmp_path / "cut.bin"
    cut.write_bytes(out.read_bytes()[:-100])
    r = CliRunner().invoke(cli, ["model", "info", str(cut)])
    assert r.exit_code == 1 and "truncated" in r.output
