"""``nexos model``: synth | import | prepare | ref | info. Wiring only; the work is in the
modules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nexos.model.format import (
    CheckpointError,
    ModelConfig,
    check_size,
    checkpoint_size,
    read_header,
)
from nexos.model.gguf_import import import_gguf
from nexos.model.hf_import import import_hf
from nexos.model.prepared import write_prepared
from nexos.model.reference import RequestError, generate
from nexos.model.synth import PRESETS, WEIGHT_TYPES, synthesize
from nexos.model.tokenizer import TokenizerError, tokenizer_blob

console = Console()


def _config_dict(cfg: ModelConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d.update(head_dim=cfg.head_dim, kv_dim=cfg.kv_dim, weight=cfg.weight_name)
    return d


def _show_written(kind: str, path: str, cfg: ModelConfig, size: int, secs: float,
                  as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"path": path, "size": size, "seconds": round(secs, 3),
                               "config": _config_dict(cfg)}))
        return
    console.print(f"[green]{kind}[/] {path}: {size} bytes, {cfg.weight_name}, "
                  f"{cfg.n_layers} layers, dim {cfg.dim}, vocab {cfg.vocab_size} "
                  f"({secs:.1f} s)")


def _kv_table(title: str) -> Table:
    """A two-column key/value table whose values wrap instead of being cut."""
    t = Table(title=title, show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value", overflow="fold")
    return t


def _parse_tokens(text: str) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; ClickException on anything else."""
    parts = [p.strip() for p in text.split(",")]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise click.ClickException(f"--prompt-tokens: {text!r} is not a comma-separated "
                                   "list of integers") from None


class ModelGroup(click.Group):
    """The ``model`` group: a bad file or config (CheckpointError, whose message names the
    file, or TokenizerError) from any of its commands becomes one ClickException, which the
    ``nexos`` command line prints as one line ``nexos: error: <file>: <why>``, exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CheckpointError, TokenizerError) as e:
            raise click.ClickException(str(e)) from None


@click.group("model", cls=ModelGroup)
def model() -> None:
    """Model checkpoints: synthetic, imported from Hugging Face, and the numpy reference."""


@model.command("synth")
@click.option("--preset", type=click.Choice(list(PRESETS)), default="smollm-135m",
              show_default=True, help="Model geometry.")
@click.option("--seed", type=int, default=0, show_default=True, help="RNG seed.")
@click.option("--weight-type", type=click.Choice(list(WEIGHT_TYPES)), default="int8",
              show_default=True)
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Override the preset's number of layers.")
@click.option("--tied/--untied", default=None, help="Override the preset's embedding tying.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def synth_cmd(preset: str, seed: int, weight_type: str, layers: int | None,
              tied: bool | None, out: str, as_json: bool) -> None:
    """Write a deterministic synthetic checkpoint (meaningless weights, real geometry)."""
    r = synthesize(out, preset, seed, weight_type, layers, tied)
    _show_written("synthesized", r.path, r.config, r.size, r.seconds, as_json)


@model.command("import")
@click.option("--config", "config_path", type=click.Path(),
              help="Hugging Face config.json (with --weights).")
@click.option("--weights", type=click.Path(),
              help="model.safetensors, model.safetensors.index.json (sharded) or a folder "
                   "holding either; F32, F16 or BF16 tensors.")
@click.option("--gguf", "gguf_path", type=click.Path(),
              help="A llama GGUF file (e.g. SmolLM2-135M-Instruct.Q4_1.gguf): its blocks "
                   "are kept as they are, its tokenizer embedded (instead of --config and "
                   "--weights).")
@click.option("--weight-type", type=click.Choice(list(WEIGHT_TYPES)), default=None,
              help="With --config/--weights: int8 (default) or f32.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def import_cmd(config_path: str | None, weights: str | None, gguf_path: str | None,
               weight_type: str | None, out: str, as_json: bool) -> None:
    """Convert Hugging Face Llama/SmolLM weights, or a llama GGUF file, to a NexOS
    checkpoint."""
    if gguf_path is not None:
        if config_path is not None or weights is not None or weight_type is not None:
            raise click.ClickException("--gguf takes the whole model from the GGUF file: "
                                       "give it without --config, --weights and "
                                       "--weight-type")
        _import_gguf(gguf_path, out, as_json)
        return
    if config_path is None or weights is None:
        raise click.ClickException("give --config and --weights (Hugging Face), or --gguf "
                                   "FILE")
    r = import_hf(config_path, weights, out, weight_type or "int8")
    _show_written("imported", r.path, r.config, r.size, r.seconds, as_json)


def _import_gguf(path: str, out: str, as_json: bool) -> None:
    """``import --gguf``: the checkpoint with the GGUF's tokenizer blob when it has one (a
    tokenizer of another kind is left out, with the reason; a broken file is an error)."""
    try:
        blob: bytes | None = tokenizer_blob(path)
        why = ""
    except TokenizerError as e:
        blob, why = None, str(e).removeprefix(f"{path}: ")
    r = import_gguf(path, out, tokenizer=blob)
    tok = f"tokenizer {len(blob)} bytes" if blob else f"no tokenizer ({why})"
    if as_json:
        click.echo(json.dumps({"path": r.path, "size": r.size, "seconds": round(r.seconds, 3),
                               "model": r.model_name, "source": r.source,
                               "tokenizer_size": len(blob) if blob else 0,
                               "config": _config_dict(r.config)}))
        return
    console.print(f"[green]imported[/] {r.describe()}; {tok} ({r.seconds:.1f} s)")


@model.command("prepare")
@click.argument("ckpt")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def prepare_cmd(ckpt: str, out: str, as_json: bool) -> None:
    """Write the prepared form of a version 1 or 2 checkpoint (format version 3,
    docs/checkpoint.md): the weights as the guest's integer matvec uses them, so that
    smolprobe and smolserve map the file instead of reading it, and every process shares
    its pages. `make` puts this form on the LLM image."""
    import time

    t0 = time.monotonic()
    cfg = write_prepared(ckpt, out)
    size = Path(out).stat().st_size
    _show_written("prepared", out, cfg, size, time.monotonic() - t0, as_json)


@model.command("info")
@click.argument("ckpt")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def info_cmd(ckpt: str, as_json: bool) -> None:
    """Print a checkpoint's header (after checking the file has the size it implies)."""
    cfg = read_header(ckpt)
    check_size(ckpt, cfg)
    d = _config_dict(cfg)
    d["file_size"] = checkpoint_size(cfg)
    if as_json:
        click.echo(json.dumps(d))
        return
    t = _kv_table(ckpt)
    for k, v in d.items():
        t.add_row(k, str(v))
    console.print(t)


@model.command("ref")
@click.argument("ckpt")
@click.option("--prompt-tokens", required=True, help="Comma-separated token ids, e.g. 1,2,3.")
@click.option("--gen-len", type=int, default=10, show_default=True)
@click.option("--seq-len", type=int, default=None,
              help="KV cache rows [default: min(256, max_seq_len)].")
@click.option("--temperature", type=float, default=0.0, show_default=True,
              help="0 = greedy.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampler seed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ref_cmd(ckpt: str, prompt_tokens: str, gen_len: int, seq_len: int | None,
            temperature: float,
            seed: int, as_json: bool) -> None:
    """Run the numpy reference forward pass and generate tokens."""
    prompt = _parse_tokens(prompt_tokens)
    try:
        r = generate(ckpt, prompt, gen_len, seq_len, temperature, seed)
    except RequestError as e:
        raise click.ClickException(str(e)) from None
    d = r.to_dict()
    if as_json:
        click.echo(json.dumps(d))
        return
    t = _kv_table(f"reference: {ckpt}")
    for k in ("prompt_tokens", "tokens", "positions", "logits_digest", "logits_min",
              "logits_max", "logits_sum", "seconds"):
        v = d[k]
        t.add_row(k, ",".join(map(str, v)) if isinstance(v, list) else str(v))
    console.print(t)
