"""The model's programs from the host: `nexos probe`, `chat`, `compare`, `plot` and
`serve`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from nexos.clikit import (
    OptionError,
    bit_option,
    check_output_dir,
    fail,
    llm_cpus_opt,
    mem_opt,
    nobuild_opt,
    out,
    prepare,
    repo,
    tokens_type,
)
from nexos.machine.build import host_program
from nexos.machine.config import MAX_CPUS, MAX_SWAPSIZE, BuildConfig, ConfigError, matrix
from nexos.machine.limits import (
    SMOLPROBE_MAX_SAMPLES,
    SMOLPROBE_SEQ_LEN,
    SMOLSERVE_MAX_PROMPT,
    SMOLSERVE_MAX_REQUESTS,
)
from nexos.machine.qemu import QemuError, QemuSession
from nexos.programs.compare import compare_probes, probe_record, run_probe, run_probes
from nexos.programs.serve import (
    DEFAULT_MAX_LEN,
    DEFAULT_REQUESTS,
    GUEST_WORKLOAD,
    PRESSURE_MEMSIZE,
    PRESSURE_WORKLOADS,
    ServeWorkload,
    check_workload,
    pressure_workloads,
    run_serves,
    run_swap_comparisons,
    serve_command,
    serve_workload,
    workload_commands,
)
from nexos.programs.tables import (
    compare_table,
    formulas_note,
    parallel_table,
    probe_table,
    record_json,
    records_json,
    serve_json,
    serve_table,
    swap_json,
    swap_table,
)
from nexos.records import BRANCH_GEN_LEN, TEXT_GEN, ProbeRequest


@contextmanager
def session_after(session: QemuSession, setup: list[str], timeout: float
                  ) -> Iterator[QemuSession]:
    """`session`, booted, once every command of `setup` ran in its shell without printing
    anything (a command that prints is a QemuError: the shell refused it)."""
    with session as s:
        for cmd in setup:
            said = s.run(cmd, timeout).output.strip()
            if said:
                raise QemuError(f"`{cmd}` failed: {said.splitlines()[0]}", said)
        yield s


@click.command(context_settings={"ignore_unknown_options": True})
@bit_option("--lazy", 1, "LAZY_ALLOC.")
@bit_option("--cow", 0, "COW_ALLOC (smolprobe does not fork unless --samples).")
@mem_opt
@llm_cpus_opt
@click.option("--timeout", type=float, default=900.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the parsed record as JSON.")
@nobuild_opt
@click.argument("smolprobe_args", nargs=-1, type=click.UNPROCESSED)
def probe(lazy: int, cow: int, memsize: int, cpus: int, timeout: float, as_json: bool,
          no_build: bool, smolprobe_args: tuple[str, ...]) -> None:
    """Run smolprobe once and show its parsed result.

    Arguments after the options go to smolprobe (default: --prompt-tokens 1,2,3 --gen-len 10;
    or e.g. -- --chat "What is the capital of France?")."""
    cfg = BuildConfig(lazy, cow, memsize, cpus)
    try:
        req = ProbeRequest.from_args(smolprobe_args)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="SMOLPROBE_ARGS") from None
    r = prepare([cfg], True, no_build)
    run_ = run_probe(r, cfg, req, timeout)
    if run_.problem:
        if run_.evidence:
            click.echo(run_.evidence.rstrip()[-1500:], err=True)
        fail(run_.problem)
    assert run_.result is not None
    if as_json:
        click.echo(record_json(probe_record(run_, req)))
    else:
        out.print(probe_table(run_.result, f"smolprobe on {cfg.name} ({run_.seconds:.1f}s)"))
    if run_.result.error:
        sys.exit(1)


@click.command()
@mem_opt
@llm_cpus_opt
@click.option("--gen-len", type=click.IntRange(1), default=TEXT_GEN, show_default=True,
              help="The longest answer, in tokens (it ends earlier at <|im_end|>).")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
@click.argument("question")
def chat(memsize: int, cpus: int, gen_len: int, timeout: float, no_build: bool,
         question: str) -> None:
    """Ask the model on the LLM image one QUESTION (smolprobe --chat) in a lazy kernel
    (lazy1-cow0): its answer, then the KV pages the answer really mapped."""
    cfg = BuildConfig(1, 0, memsize, cpus)
    req = ProbeRequest(gen_len=gen_len, text=("--chat", question))
    run_ = run_probe(prepare([cfg], True, no_build), cfg, req, timeout)
    if run_.problem:
        if run_.evidence:
            click.echo(run_.evidence.rstrip()[-1500:], err=True)
        fail(run_.problem)
    res = run_.result
    assert res is not None
    if res.error or res.summary is None or res.text is None:
        fail(f"smolprobe: {res.error or 'no answer'}")
    assert res.summary is not None and res.generated is not None and res.prompt is not None
    out.print(escape(res.text or ""), highlight=False)
    s = res.summary
    out.print(f"[dim]{len(res.prompt)} prompt + {res.generated.tokens} answer tokens "
              f"in {run_.seconds:.1f}s on {cfg.name}: {s.actual_mapped_pages} of "
              f"{s.max_kv_pages} reserved KV pages mapped, {s.saved_pages} "
              f"({s.saved_percent}%) never touched[/]", highlight=False)


def request_options(f: Any) -> Any:
    for opt in reversed([
        click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3",
                     show_default=True, help="Prompt token ids."),
        click.option("--prompt", "prompt_text", default=None, metavar="TEXT",
                     help="A text prompt instead of --prompt-tokens, encoded by the "
                          "model's tokenizer in the guest (smolprobe --prompt)."),
        click.option("--gen-len", type=click.IntRange(0), default=10, show_default=True),
        click.option("--seq-len", type=click.IntRange(1), default=None,
                     help=f"smolprobe --seq-len (default {SMOLPROBE_SEQ_LEN}, at most the "
                          "model's max_seq_len)."),
        click.option("--samples", type=click.IntRange(1, SMOLPROBE_MAX_SAMPLES), default=None,
                     help=f"Parallel sampling branches, 1..{SMOLPROBE_MAX_SAMPLES} "
                          "(smolprobe --samples)."),
        click.option("--timeout", type=float, default=900.0, show_default=True),
    ]):
        f = opt(f)
    return f


@click.command()
@request_options
@click.option("--matrix", "all_", is_flag=True, help="All four LAZY/COW configurations.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@mem_opt
@nobuild_opt
def compare(prompt: tuple[int, ...], prompt_text: str | None, gen_len: int,
            seq_len: int | None, samples: int | None, timeout: float, all_: bool,
            as_json: bool, memsize: int, no_build: bool) -> None:
    """smolprobe on eager (LAZY_ALLOC=0) vs lazy (LAZY_ALLOC=1), side by side.

    With --samples N the same request with --samples N also runs on the lazy kernel with
    COW_ALLOC=0 and =1 (smolprobe forks N branches after the prompt), for a second table:
    parallel sampling with COW off and on."""
    if prompt_text is not None and samples is not None:
        raise OptionError("--samples takes --prompt-tokens, not a text --prompt "
                          "(smolprobe's branches start from token ids)")
    text = None if prompt_text is None else ("--prompt", prompt_text)
    req = ProbeRequest(prompt, gen_len, seq_len, text=text)
    probes = compare_probes(req, samples, all_, memsize)
    r = prepare(list(dict.fromkeys(c for c, _ in probes)), True, no_build)
    records = [probe_record(run_, asked)
               for run_, (_, asked) in zip(run_probes(r, probes, timeout), probes)]
    if as_json:
        click.echo(records_json(records))
    else:
        out.print(compare_table(records, req.command()))
        out.print(formulas_note(records), highlight=False)
        par = parallel_table(records)
        if par is not None:
            out.print(par)
    sys.exit(1 if any(x.failed for x in records) else 0)


def int_list(text: str, what: str, most: int | None = None) -> tuple[int, ...]:
    """`64,128,256` -> (64, 128, 256); the empty string -> (). Values 1..most."""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of integers", param_hint=what) from None
    if any(v < 1 for v in vals):
        raise click.BadParameter(f"{text!r}: values must be >= 1", param_hint=what)
    if most is not None and any(v > most for v in vals):
        raise click.BadParameter(f"{text!r}: values must be <= {most}", param_hint=what)
    return vals


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("build/plots"), show_default=True, help="Where the PNGs go.")
@click.option("--prompt-tokens", "prompt", type=tokens_type, default="1,2,3", show_default=True)
@click.option("--gen-len", type=click.IntRange(1), default=40, show_default=True,
              help="Tokens to generate for the trace figure.")
@click.option("--seq-lens", default="64,128,256", show_default=True,
              help="seq_len values for the saved-fraction figure ('' skips it).")
@click.option("--branches", default="1,2,4", show_default=True,
              help=f"--samples values (1..{SMOLPROBE_MAX_SAMPLES}) for the branches figure "
                   "('' skips it).")
@click.option("--branch-gen-len", type=click.IntRange(1), default=BRANCH_GEN_LEN,
              show_default=True,
              help="Tokens each branch generates for the branches figure (a branch makes "
                   "all its copies at its first writes).")
@click.option("--serve", "serve_flags", default="--requests 8 --max-len 256 --long-len 4",
              show_default=True,
              help="smolserve flags for the serving figure, all four kernels ('' skips it).")
@click.option("--timeout", type=float, default=900.0, show_default=True)
@nobuild_opt
def plot(out_dir: Path, prompt: tuple[int, ...], gen_len: int, seq_lens: str, branches: str,
         branch_gen_len: int, serve_flags: str, timeout: float, no_build: bool) -> None:
    """PNG figures: mapped KV pages vs tokens (eager vs lazy, from --trace); saved fraction vs
    seq_len (lazy); pages the branches of --samples N cost vs N (COW on vs off); smolserve's
    concurrent requests and memory over time (all four kernels)."""
    from nexos.programs.plot import (  # matplotlib loads slowly
        PlotPlan,
        write_plots,
        write_serve_plot,
    )

    check_output_dir(out_dir)
    plan = PlotPlan(prompt, gen_len, int_list(seq_lens, "--seq-lens"),
                    int_list(branches, "--branches", SMOLPROBE_MAX_SAMPLES),
                    tuple(serve_flags.split()), branch_gen_len)
    serve_cfgs = [BuildConfig(lz, cw, cpus=2) for lz, cw in plan.serve_configs()]
    r = prepare(list(dict.fromkeys(plan.configs() + serve_cfgs)), True, no_build)
    for png in write_plots(plan, run_probes(r, plan.probes(), timeout), out_dir):
        click.echo(f"wrote {png}")
    if serve_cfgs:
        def open_shell(lazy: int, cow: int, n: int) -> QemuSession:
            return QemuSession.for_config(BuildConfig(lazy, cow, cpus=n), r, llm=True)

        records = run_serves(open_shell, plan.serve_configs(), 2, plan.serve_args, timeout,
                             (QemuError,))
        try:
            click.echo(f"wrote {write_serve_plot(records, out_dir)}")
        except ValueError as e:
            fail(str(e))


@click.command()
@click.option("--matrix", "all_", is_flag=True,
              help="All four LAZY/COW configurations (default: lazy0-cow0 and lazy1-cow1).")
@click.option("--workload", default=None, metavar="seed32|FILE",
              help="The built-in seed32, or a workload file on this machine (lines `id "
                   "max_len prompt gen=N|eos`, docs/smolserve.md): checked first, then "
                   f"written into each guest as {GUEST_WORKLOAD}.")
@click.option("--requests", type=click.IntRange(1, SMOLSERVE_MAX_REQUESTS), default=None,
              show_default=f"{DEFAULT_REQUESTS} when no workload is given",
              help="A generated workload of N requests (with --max-len).")
@click.option("--max-len", type=click.IntRange(2), default=None,
              show_default=f"{DEFAULT_MAX_LEN} when no workload is given",
              help="Slots each generated request reserves (with --requests).")
@click.option("--seed", type=click.IntRange(0), default=None,
              help="The generated workload's seed (smolserve's default 0).")
@click.option("--long-len", type=click.IntRange(1), default=None,
              help="Longest generated answer (smolserve's default 16).")
@click.option("--prefix-len", type=click.IntRange(1, SMOLSERVE_MAX_PROMPT - 4), default=None,
              help="Every generated prompt begins with the same K tokens, a prefix the "
                   "server prefills once and its workers share (docs/smolserve.md).")
@click.option("--share-prefix/--no-share-prefix", default=True, show_default=True,
              help="Whether requests that begin with the same prefix share it; without, "
                   "each request prefills its whole prompt alone.")
@click.option("--cpus", type=click.IntRange(1, MAX_CPUS), default=2, show_default=True,
              help="Harts.")
@click.option("--swap", "swap_mib", type=click.IntRange(1, MAX_SWAPSIZE), default=None,
              metavar="MiB",
              help="Recompute against swap: run each workload under overcommit (smolserve "
                   "--overcommit 1 --test-fill 1) on a boot without swap and on one with a "
                   "swap disk of MiB, and print them side by side. With no workload options: "
                   "a short, a medium and a long workload "
                   f"({', '.join(f'{n}x{m}' for _, n, m in PRESSURE_WORKLOADS)}), "
                   f"--mem {PRESSURE_MEMSIZE} unless given, lazy1-cow1 unless --matrix.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.option("--timeout", type=float, default=1800.0, show_default=True)
@mem_opt
@nobuild_opt
def serve(all_: bool, workload: str | None, requests: int | None, max_len: int | None,
          seed: int | None, long_len: int | None, prefix_len: int | None, share_prefix: bool,
          cpus: int, swap_mib: int | None, as_json: bool, timeout: float, memsize: int,
          no_build: bool) -> None:
    """smolserve (docs/smolserve.md): how many requests run at once, per configuration.

    With no workload options it runs the README's: --requests 32 --max-len 2048. With
    --swap MiB: what memory pressure costs without swap (recompute) and with it."""
    if swap_mib is not None:
        serve_swap(all_, (workload, requests, max_len, seed, long_len, prefix_len),
                   share_prefix, cpus, swap_mib, as_json, timeout, memsize, no_build)
        return
    load, setup = serve_plan(workload, requests, max_len, seed, long_len, prefix_len,
                             share_prefix)
    configs = matrix(memsize, cpus) if all_ else [BuildConfig(0, 0, memsize, cpus),
                                                  BuildConfig(1, 1, memsize, cpus)]
    r = prepare(configs, True, no_build)
    if load.note and not as_json:
        out.print(load.note, highlight=False)

    def open_shell(lazy: int, cow: int, n: int) -> AbstractContextManager[QemuSession]:
        session = QemuSession.for_config(BuildConfig(lazy, cow, memsize, n), r, llm=True,
                                         lifetime=timeout + 300)
        return session_after(session, setup, 60.0)

    records = run_serves(open_shell, [(c.lazy, c.cow) for c in configs], cpus, load.args,
                         timeout, (QemuError,))
    if as_json:
        click.echo(serve_json(records))
    else:
        out.print(serve_table(records, serve_command(load.args)))
    sys.exit(1 if any(x.failed for x in records) else 0)


def serve_swap(all_: bool, options: tuple, share_prefix: bool, cpus: int, swap_mib: int,
               as_json: bool, timeout: float, memsize: int, no_build: bool) -> None:
    """`nexos serve --swap MiB`: each workload on each configuration without swap and with
    (docs/smolserve.md, "Overcommit: recompute against swap"); exit 1 unless every pair
    completed every request with the same answers."""
    workload, requests, max_len, seed, long_len, prefix_len = options
    setup: list[str] = []
    if workload is None and requests is None and max_len is None:
        tuning = [f for f, v in (("--seed", seed), ("--long-len", long_len),
                                 ("--prefix-len", prefix_len)) if v is not None]
        if tuning or not share_prefix:
            given = tuning or ["--no-share-prefix"]
            raise OptionError(f"{' and '.join(given)} goes with a given workload (--workload, "
                              "or --requests/--max-len): --swap alone runs its own three")
        workloads = pressure_workloads(None)
        if click.get_current_context().get_parameter_source("memsize") == \
                click.core.ParameterSource.DEFAULT:
            memsize = PRESSURE_MEMSIZE
    else:
        load, setup = serve_plan(workload, requests, max_len, seed, long_len, prefix_len,
                                 share_prefix)
        workloads = pressure_workloads(load)
    configs = matrix(memsize, cpus) if all_ else [BuildConfig(1, 1, memsize, cpus)]
    r = prepare(configs, True, no_build)

    def open_shell(lazy: int, cow: int, n: int, swap: int
                   ) -> AbstractContextManager[QemuSession]:
        cfg = BuildConfig(lazy, cow, memsize, n, swapsize=swap)
        session = QemuSession.for_config(cfg, r, llm=True, lifetime=timeout + 300)
        return session_after(session, setup, 60.0)

    pairs = run_swap_comparisons(open_shell, [(c.lazy, c.cow) for c in configs], cpus,
                                 workloads, swap_mib, timeout, (QemuError,))
    if as_json:
        click.echo(swap_json(pairs))
    else:
        out.print(swap_table(pairs))
        for c in pairs:
            if c.problem is None:
                continue
            for rec in (c.without, c.with_swap):
                if rec.evidence:
                    out.print(f"[bold]{c.workload}, {rec.config}:[/bold] {rec.command}",
                              highlight=False)
                    out.print(rec.evidence[-1500:], markup=False, highlight=False)
    sys.exit(1 if any(c.problem is not None for c in pairs) else 0)


def serve_plan(workload: str | None, requests: int | None, max_len: int | None,
               seed: int | None, long_len: int | None, prefix_len: int | None = None,
               share_prefix: bool = True) -> tuple[ServeWorkload, list[str]]:
    """`nexos serve`'s workload options -> (serve.serve_workload's answer, the shell
    commands that write its workload file into the guest). A mix or a half of the options
    is an OptionError (exit 2); a bad workload file a ConfigError `<file>[:<line>]: <why>`
    (exit 1), smolserve's own reason (check_workload), both before any kernel is built."""
    try:
        load = serve_workload(workload, requests, max_len, seed, long_len, prefix_len,
                              share_prefix)
    except ValueError as e:
        raise OptionError(str(e)) from None
    if load.file is None:
        return load, []
    smolserve = host_program(repo(), "build/host/smolserve")
    try:
        return load, workload_commands(check_workload(load.file, smolserve))
    except ValueError as e:
        raise ConfigError(str(e)) from None
